/* The live viewer's form: POST the sentence (or pair) to /api/view on this
 * origin, then mount the views on the answer; a bad input shows the server's
 * message in #web-error. With "long document" ticked (#along) the answer is the
 * stats-first page's data (statistics along the text), drawn by segments.js. */
"use strict";
(function () {
  const JX = window.JaxattnViews;
  const $ = (id) => document.getElementById(id);
  function init() {
    const form = $("web-form"), pair = $("pair"), b = $("text-b"), err = $("web-error"), status = $("web-status");
    const a = $("text-a"), along = $("along");
    pair.addEventListener("change", () => { b.disabled = !pair.checked; });
    // a textarea (a pasted document keeps its line breaks); Enter submits as in a one-line box
    a.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); form.requestSubmit(); }
    });
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const views = [...form.querySelectorAll('input[name="view"]:checked')].map((x) => x.value);
      const body = { text: a.value, text_b: pair.checked ? b.value : null, views, along: along.checked };
      err.hidden = true; status.textContent = "capturing…"; $("go").disabled = true;
      const root = $("jaxattn");
      try {
        const r = await fetch("/api/view", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
        const doc = await r.json().catch(() => ({ error: `the server answered ${r.status}` }));
        if (!r.ok || doc.error) throw new Error(doc.error || `the server answered ${r.status}`);
        status.textContent = "";
        if (doc.format === "jaxattn.views.segments.page/1") JX.mountSegments(root, doc);
        else await JX.mount(root, doc).ready;
      } catch (x) {
        status.textContent = "";
        err.textContent = x.message; err.hidden = false;
        root.innerHTML = ""; root.dataset.state = "error";
      } finally { $("go").disabled = false; }
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
