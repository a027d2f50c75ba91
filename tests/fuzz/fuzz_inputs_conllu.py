"""`read_records` on hostile CoNLL-U files: sentences, their words and dependency arcs."""

from __future__ import annotations

from inputs_target import DESIGNED, read

from jaxattn.inputs import SAMPLE_CORPUS

__all__ = ["DESIGNED"]
TOKENS = (b"\t", b"\n\n", b"# sent_id = ", b"# text = ", b"1-2", b"1.1", b"_", b"0", b"root")


def seeds() -> list[bytes]:
    sample = SAMPLE_CORPUS.read_bytes()
    first = sample[: sample.index(b"\n\n", 600) + 2]  # the sample's first sentences
    return [
        first,
        b"# sent_id = s1\n# text = The cat sat.\n"
        b"1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n"
        b"2\tcat\tcat\tNOUN\tNN\t_\t3\tnsubj\t_\t_\n"
        b"3-4\tsat.\t_\t_\t_\t_\t_\t_\t_\t_\n"
        b"3\tsat\tsit\tVERB\tVBD\t_\t0\troot\t_\t_\n"
        b"4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_\n\n",
    ]


def one_input(data: bytes) -> None:
    read(data, ".conllu", "conllu")
