"""Query instructions: the one prompt format, and per-dataset instructions for evaluation.

An instruction prompts the *dense query* side only (the per-token table rows, the full
model's query embedding, the trainer's symmetric teacher); documents never get one. A
bundle stores the formatted prompt of each of its tables, so that the table, the
``full-dense`` evaluation run and training all see exactly the same text.

Evaluation follows the paper's BEIR protocol: a dataset is searched with its own task
instruction when the bundle has a table of that name (``lr bundle build --instruction
scifact=@beir`` builds one from :data:`BEIR_INSTRUCTIONS`), else with the bundle's default.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from lr_opensearch.errors import ConfigError

#: The dense query side's prompt: an instruction followed by the query (E5-Mistral style).
QUERY_PROMPT = "Instruct: {instruction}\nQuery: "

#: ``NAME=@beir`` in ``--instruction`` takes the text below for NAME.
CATALOGUE_MARK = "@beir"

#: Task instructions per BEIR dataset (our wording of each dataset's retrieval task).
BEIR_INSTRUCTIONS: Mapping[str, str] = {
    "arguana": "Find the counter-argument to this argument",
    "climate-fever": "Find evidence for or against this statement about the climate",
    "cqadupstack": "Find forum questions asking the same thing as this one",
    "dbpedia-entity": "Find the encyclopedia entities this query is about",
    "fever": "Find encyclopedia passages that confirm or contradict this statement",
    "fiqa": "Find answers from an investment forum to this finance question",
    "hotpotqa": "Find the passages needed to answer this question in several hops",
    "msmarco": "Find web passages answering this search",
    "nfcorpus": "Find medical articles about this health topic",
    "nq": "Find the encyclopedia passage holding the answer to this question",
    "quora": "Find questions with the same meaning as this question",
    "scidocs": "Find abstracts of papers that a paper with this title would cite",
    "scifact": "Find study abstracts that confirm or contradict this scientific statement",
    "trec-covid": "Find research articles on COVID-19 relevant to this request",
    "webis-touche2020": "Find arguments taking a side on this debate question",
    "touche2020": "Find arguments taking a side on this debate question",
    "cranfield": "Find aeronautics abstracts relevant to this engineering question",
    "cisi": "Find library and information science documents matching this information need",
    "adi": "Find documentation research abstracts relevant to this question",
}


def format_instruction(instruction: str | None) -> str:
    """The query prompt for ``instruction``; the empty string for no instruction."""
    return QUERY_PROMPT.format(instruction=instruction) if instruction else ""


def resolve_instruction_text(name: str, text: str) -> str:
    """The raw instruction of ``--instruction NAME=TEXT`` (``@beir``: the catalogue's)."""
    if text != CATALOGUE_MARK:
        return text
    if name not in BEIR_INSTRUCTIONS:
        raise ConfigError(f"--instruction {name}={CATALOGUE_MARK}: no catalogue instruction for "
                          f"{name!r}; known: {sorted(BEIR_INSTRUCTIONS)}")
    return BEIR_INSTRUCTIONS[name]


def dataset_instruction(table_names: Iterable[str], dataset: str,
                        requested: str | None = None) -> tuple[str | None, str]:
    """(table name or None for the bundle default, how it was chosen) for a dataset.

    ``requested`` (``lr eval --instruction``) wins; else the table named after the dataset
    (case-insensitive); else the default.
    """
    if requested:
        return requested, "requested"
    by_lower = {n.lower(): n for n in table_names}
    if dataset.lower() in by_lower:
        return by_lower[dataset.lower()], "dataset table"
    return None, "bundle default"


def document_text(title: str, text: str) -> str:
    """Join a document's title and text for the encoder (BEIR convention:
    ``title + " " + text``): ingest, table fitting and reranking read documents so."""
    title, text = title.strip(), text.strip()
    if title and text:
        return f"{title} {text}"
    return title or text
