"""The admission refusals' words (service.admission.refusal): sizes under a MiB are
said as they are, not rounded to "0 MiB" (a request "needs 1 MiB; this server allows
0 MiB" told a user nothing)."""

from __future__ import annotations

from service.admission import refusal


def test_a_request_over_the_buffers_names_both_sizes_unrounded():
    why = refusal(admitted=0, queue_size=4, reserve=1_100_000, reserved=0, total_bytes=400_000)
    assert why is not None
    assert "needs 1.1 MB of result buffer; this server allows 400.0 kB" in str(why)
    assert "max_buffered_bytes" in str(why)


def test_full_buffers_say_how_much_is_reserved():
    why = refusal(admitted=1, queue_size=4, reserve=300_000, reserved=250_000, total_bytes=500_000)
    assert why is not None
    assert "(250.0 kB of 500.0 kB reserved); retry later" in str(why)
    assert (
        refusal(admitted=1, queue_size=4, reserve=250_000, reserved=250_000, total_bytes=500_000)
        is None
    )
