"""One instruction format for training, bundle build and evaluation; per-dataset choice."""

from __future__ import annotations

import pytest

from lr_opensearch.cli.bundle import parse_instructions
from lr_opensearch.errors import ConfigError
from lr_opensearch.instructions import BEIR_INSTRUCTIONS, dataset_instruction, format_instruction
from trainer.config import format_instruction as trainer_format


def test_build_formats_instructions_exactly_as_training() -> None:
    got = parse_instructions(["qa=Find the answer", "default=", "scifact=@beir"])
    assert got == {"qa": trainer_format("Find the answer"), "default": "",
                   "scifact": trainer_format(BEIR_INSTRUCTIONS["scifact"])}
    assert got["qa"] == "Instruct: Find the answer\nQuery: "
    assert trainer_format is format_instruction  # one definition
    with pytest.raises(ConfigError, match=r"no catalogue instruction for 'mydata'"):
        parse_instructions(["mydata=@beir"])
    with pytest.raises(ConfigError, match="expected NAME=TEXT"):
        parse_instructions(["qa"])


def test_eval_picks_the_dataset_table_then_the_default_and_a_request_wins() -> None:
    tables = ["default", "SciFact", "fiqa"]
    assert dataset_instruction(tables, "scifact") == ("SciFact", "dataset table")
    assert dataset_instruction(tables, "nfcorpus") == (None, "bundle default")
    assert dataset_instruction(tables, "scifact", "fiqa") == ("fiqa", "requested")
