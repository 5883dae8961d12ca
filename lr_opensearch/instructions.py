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

from collections.abc import Mapping

from lr_opensearch.errors import ConfigError

#: The dense query side's prompt: an instruction followed by the query (E5-Mistral style).
QUERY_PROMPT = "Instruct: {instruction}\nQuery: "

#: ``NAME=@beir`` in ``--instruction`` takes the text below for NAME.
CATALOGUE_MARK = "@beir"

#: Task instructions per BEIR dataset (our wording of each dataset's retrieval task).
BEIR_INSTRUCTIONS: Mapping[str, str] = {
    "arguana": "Given a claim, find documents that refute the claim",
    "climate-fever": "Given a claim about climate change, retrieve documents that support or refute the claim",
    "cqadupstack": "Given a question, retrieve detailed question descriptions from Stackexchange that are duplicates to the given question",
    "dbpedia-entity": "Given a query, retrieve relevant entity descriptions from DBPedia",
    "fever": "Given a claim, retrieve documents that support or refute the claim",
    "fiqa": "Given a financial question, retrieve user replies that best answer the question",
    "hotpotqa": "Given a multi-hop question, retrieve documents that can help answer the question",
    "msmarco": "Given a web search query, retrieve relevant passages that answer the query",
    "nfcorpus": "Given a question, retrieve relevant documents that best answer the question",
    "nq": "Given a question, retrieve Wikipedia passages that answer the question",
    "quora": "Given a question, retrieve questions that are semantically equivalent to the given question",
    "scidocs": "Given a scientific paper title, retrieve paper abstracts that are cited by the given paper",
    "scifact": "Given a scientific claim, retrieve documents that support or refute the claim",
    "trec-covid": "Given a query on COVID-19, retrieve documents that answer the query",
    "webis-touche2020": "Given a question, retrieve detailed and persuasive arguments that answer the question",
    "touche2020": "Given a question, retrieve detailed and persuasive arguments that answer the question",
    "cranfield": "Given a question about aerodynamics, retrieve abstracts that answer the question",
    "cisi": "Given a description of an information need, retrieve documents about library and information science that meet it",
    "adi": "Given a question about documentation, retrieve abstracts that answer the question",
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


def dataset_instruction(table_names: Mapping[str, str] | list[str], dataset: str,
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
