"""One shard of a dump job: records in, a committed manifest part out.

Parse the shard's records (bad ones reported by line, then skipped or fatal
per ``on_error``), tokenise (too-long texts truncated, skipped or errors per
``too_long``), with ``--generate N`` continue each text on the decoder (a prompt
whose tokens + N exceed the positions: too long as above), capture on the local
devices (`Engine.run`, batches as they finish), append each capture to the
shard's arrays, and commit.
"""

from __future__ import annotations

import os

from jaxattn.capture.part import CapturePart, ends_example
from jaxattn.dump.counts import Counts
from jaxattn.errors import UsageError
from jaxattn.inputs import InputError, Record, parse_record
from jaxattn.store.manifest import Skipped
from jaxattn.store.writer import ShardWriter

# The exit status of the crash test hook (`jaxattn.dump.job.CRASH_ENV`).
CRASH_STATUS = 75


class ShardTask:
    """The work on one shard of a job (`jaxattn.dump.job`); counts land in `counts`."""

    def __init__(self, job, shard: int):
        self.job, self.shard = job, shard
        self.counts = Counts()
        self.skipped: list[Skipped] = []

    def bad(
        self, record: int, line: int, reason: str, kind: str = "error", advice: str = ""
    ) -> None:
        """Report a record left out: raise under on_error="stop" (kind "error"), else count it.

        `advice` goes before the --on-error advice in the error ("..., or ").

        Raises:
          InputError: naming the input file and line, when the job stops on errors.
        """
        path = self.job.options.input
        where = f"{path}:{line}"
        if kind == "error" and self.job.options.on_error == "stop":
            raise InputError(
                line, f"{reason} ({advice}pass --on-error skip to skip bad records)", path
            )
        self.skipped.append(Skipped(record=record, line=line, reason=kind, message=reason))
        if kind == "error":
            self.counts.errors += 1
        else:
            self.counts.skipped += 1
        self.job.message(f"{where}: {reason}: skipped")

    def records(self) -> list[Record]:
        """The shard's readable records, in input order (the others go to `bad`)."""
        out = []
        for raw in self.job.plan.shards[self.shard]:
            try:
                out.append(parse_record(raw, self.job.plan.info.format))
            except InputError as e:
                self.bad(raw.index, e.line, e.reason)
        return out

    def tokenize(self, records: list[Record]) -> list[tuple[Record, object, bool]]:
        """(record, TokenizedText, truncated) of each record kept. Each text is tokenised
        once: the tokenizer marks a long one (None under "skip", cut under "truncate"),
        so a 5 MB line costs one pass whatever the policy."""
        engine, policy = self.job.engine, self.job.options.too_long
        marked = "truncate" if policy == "truncate" else "skip"  # "error" is reported here
        try:  # the common case: one fast batch call
            batch = engine.tokenize([r.text for r in records], too_long=marked)
        except InputError:  # an unusable text, refused before any was tokenised: one by one
            batch = None
        out = []
        for k, e in enumerate(records):
            if batch is not None:
                t = batch[k]
            else:
                try:
                    t = engine.tokenize([e.text], too_long=marked)[0]
                except InputError as error:
                    self.bad(e.index, e.line, error.reason)
                    continue
            if t is not None:
                out.append((e, t, t.truncated))
                continue
            reason = f"longer than the model's limit of {engine.config.max_length} tokens"
            advice = "cut it with --too-long truncate, leave it out with --too-long skip, or "
            kind = "too_long" if policy == "skip" else "error"
            self.bad(e.index, e.line, reason, kind, advice)
        return out

    def generated(self, records: list[Record]) -> list[tuple[Record, object, bool]]:
        """(record, TokenizedText of prompt + continuation, truncated) of each record kept
        under ``--generate N`` (`jaxattn.engine.generate`): prompts checked as `tokenize`
        checks texts, then an empty one (no token, not even a BOS) is a bad record, one
        whose tokens + N exceed the model's positions too long (truncate: generated
        until the positions are full), then the rest continued."""
        from jaxattn.engine.generate import generate

        engine, options = self.job.engine, self.job.options
        new, limit, policy = options.generate, engine.config.max_length, options.too_long
        kept = []
        for e, t, cut in self.tokenize(records):
            if t.length == 0:  # a tokenizer without BOS: no token to continue from
                self.bad(e.index, e.line, "an empty prompt has no token to continue from")
                continue
            if policy != "truncate" and t.length + new > limit:
                reason = (
                    f"its {t.length} prompt tokens + {new} new tokens exceed the model's limit "
                    f"of {limit} positions"
                )
                advice = (
                    "generate fewer with --generate, continue it until the positions are full "
                    "with --too-long truncate, leave it out with --too-long skip, or "
                )
                kind = "too_long" if policy == "skip" else "error"
                self.bad(e.index, e.line, reason, kind, advice)
                continue
            kept.append((e, cut))
        if not kept:
            return []
        gens = generate(
            engine,
            [e.text for e, _ in kept],
            new,
            stop_at_eos=options.stop_at_eos,
            too_long="truncate" if policy == "truncate" else "error",
        )
        return [(e, g.sequence, cut) for (e, cut), g in zip(kept, gens, strict=True)]

    def holding_positions(self, kept: list) -> list:
        """The (record, TokenizedText, truncated) of `kept` whose text holds every query
        and key position selected (`CaptureSpec.positions_of_example`); the others go to
        `bad` (a text shorter than "-256:" asks)."""
        out = []
        for e, t, cut in kept:
            try:
                self.job.spec.positions_of_example(t.length)
            except UsageError as error:
                self.bad(e.index, e.line, str(error), advice="select positions every text has, or ")
                continue
            out.append((e, t, cut))
        return out

    def captures(self, tokenized):
        """The engine's (position, Capture) of the shard's examples; an example run in
        layer groups as its (position, CapturePart)s, each written as it lands, where
        the engine hands them over (`Engine.run(parts=True)`)."""
        engine = self.job.engine
        if hasattr(engine, "part_bytes"):
            return engine.run(tokenized, self.job.spec, parts=True)
        return engine.run(tokenized, self.job.spec)

    def run(self) -> Counts:
        """Capture and write the shard, then commit its manifest part; returns its counts."""
        job = self.job
        records = self.records()
        examples = self.tokenize if job.options.generate is None else self.generated
        kept = self.holding_positions(examples(records))
        tokenized = [t for _, t, _ in kept]
        writer = ShardWriter(
            job.kv, job.meta, self.shard, [t.length for t in tokenized], context=job.context
        )
        crash_at = len(kept) // 2 if job.crash_now() else None
        done = 0
        for pos, cap in self.captures(tokenized):
            if done == crash_at:
                os._exit(CRASH_STATUS)  # the test hook: die mid-shard, data half written
            record, _, truncated = kept[pos]
            added = writer.add(
                cap,
                record=record.index,
                line=record.line,
                id=record.id,
                truncated=truncated,
                text=record.text,
            )
            self.counts.bytes += added
            if not ends_example(cap):  # a layer group of an example: more to come
                job.progress.update(0, bytes=added)
                continue
            done += 1
            length = len(cap.fields["tokens"]) if isinstance(cap, CapturePart) else cap.length
            self.counts.examples += 1
            self.counts.truncated += truncated
            self.counts.tokens += length
            job.progress.update(1, tokens=length, bytes=added)
        job.progress.update(len(self.job.plan.shards[self.shard]) - len(kept), examples=0)
        stats = {"process": job.process.index, "devices": len(job.engine.devices)}
        writer.commit(job.plan.records(self.shard), self.skipped, stats)
        return self.counts
