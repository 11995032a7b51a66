"""The typed questions of issue 42 and the other four inputs of the newcomer's walk (issue 45), as a user types
them: the question, the context and what a person would say the model did.

The Vantrell paragraph was written for the test (about 150 words; the founder, Ilse Marrow, is named only in its
last sentence). The walk's own texts were not kept, so Washington, Orvane (two passages that disagree, 1612 vs
1634) and the Mona Lisa over an irrelevant context are written here from their descriptions; Lyon is the bundled
example ``france-capital-contradicted``. Of the paragraphs and irrelevant contexts tried, two Vantrell paragraphs
that name the founder more plainly ("was founded by the engineer Ilse Marrow") were read by the model (it
answered "Ilse Marrow"), and over "The Eiffel Tower was completed in 1889 …" it answered about the tower: these
cases are meant to be a made-up founder and a known painter, so the texts where the model does that are kept."""

from __future__ import annotations

VANTRELL = (
    "Vantrell Systems, a software company, opened its first office in 1987 above a hardware shop in the town of "
    "Brellin. Its early products were accounting programs for small farms, sold on floppy disks by mail order. "
    "During the 1990s the company moved into logistics software, and its route-planning tools were soon used by "
    "delivery firms across the continent. A new headquarters was built in 2001, and by 2010 the firm had offices "
    "in nine cities. Vantrell has won several awards for its work on energy-efficient data centres and publishes "
    "an annual report on the environmental cost of computing. Its staff volunteer in local schools, teaching "
    "children to program. The company's motto, printed above the entrance, reads: build carefully and share what "
    "you learn. That motto, like the company itself, came from Ilse Marrow."
)
ORVANE = (
    "The Orvane Bridge crosses the river Tessel at the market town of Orvane. According to the parish register, "
    "the Orvane Bridge was completed in 1612 by masons from the nearby quarries.\n\n"
    "A later town chronicle gives another account: it records that the Orvane Bridge was completed in 1634, after "
    "a flood had carried away the first wooden crossing."
)

CASES: dict[str, dict[str, str]] = {
    "vantrell": {"query": "Who founded Vantrell Systems?", "context": VANTRELL, "expect": "neither"},
    "mars": {
        "query": "How many moons does Mars have?",
        "context": "Mars has two small moons, Phobos and Deimos.",
        "expect": "read",
    },
    "hamlet": {
        "query": "Who wrote Hamlet?",
        "context": "Hamlet is a tragedy written by William Shakespeare around 1600.",
        "expect": "no author",
    },
    "french": {
        "query": "Quelle est la capitale de l'Italie ?",
        "context": "La capitale de l'Italie est Rome.",
        "expect": "swap",
    },
    "washington": {
        "query": "Who was the first president of the United States?",
        "context": "George Washington was the first president of the United States, serving from 1789 to 1797.",
        "expect": "read",
    },
    "lyon": {
        "query": "What is the capital of France?",
        "context": "The capital of France is Lyon, a city on the Rhône.",
        "expect": "read",
    },
    "orvane": {"query": "When was the Orvane Bridge completed?", "context": ORVANE, "expect": "read"},
    "mona-lisa-irrelevant": {
        "query": "Who painted the Mona Lisa?",
        "context": "Photosynthesis converts light energy into chemical energy in plants.",
        "expect": "recalled",
    },
}
