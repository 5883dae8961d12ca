"""BM25 hard-negative mining against the real OpenSearch node of the test session."""

from __future__ import annotations

import gzip
import json

import pytest

from trainer.data import TrainRecord, read_records, write_records
from trainer.mine_negatives import index_corpus, main, mine
from trainer.pairs import Doc

pytestmark = pytest.mark.node

DOCS = {
    "a": Doc("a", "Boundary layers", "Heat transfer in a laminar boundary layer over a flat plate."),
    "b": Doc("b", "Shock waves", "Supersonic flow over a wedge produces an oblique shock and heat."),
    "c": Doc("c", "Turbulent boundary layer", "Skin friction of a turbulent boundary layer at high speed."),
    "d": Doc("d", "Libraries", "Classification of books in public libraries and their catalogs."),
    "e": Doc("e", "Paris", "Paris is the capital of France; the Eiffel tower is in Paris."),
}


def test_mine_excludes_positives_and_follows_bm25(os_client, index_name):
    index_corpus(os_client, index_name, DOCS)
    rec = TrainRecord("boundary layer heat transfer", ("Heat transfer in a laminar ...",),
                      positive_ids=("a",))
    (mined,) = list(mine([rec], DOCS, os_client, index_name, recipe="title_body", keep=2))
    assert "a" not in mined.negative_ids
    assert set(mined.negative_ids) == {"b", "c"}  # the lexically related ones, not d / e
    assert mined.negatives == tuple(DOCS[i].text for i in mined.negative_ids)  # body view
    (skipped,) = list(mine([rec], DOCS, os_client, index_name, recipe="qrels", keep=1, skip=1))
    assert len(skipped.negative_ids) == 1 and skipped.negative_ids[0] == mined.negative_ids[1]
    assert skipped.negatives[0] == DOCS[skipped.negative_ids[0]].full  # title + text view


def test_cli_writes_records_and_removes_its_index(os_client, opensearch_url, index_name, tmp_path):
    coll = tmp_path / "coll"
    coll.mkdir()
    with gzip.open(coll / "corpus.jsonl.gz", "wt") as f:
        for d in DOCS.values():
            f.write(json.dumps({"_id": d.id, "title": d.title, "text": d.text}) + "\n")
    write_records(tmp_path / "in.jsonl", [TrainRecord("eiffel tower of paris and public libraries", ("x",), positive_ids=("e",))])
    code = main(["--records", str(tmp_path / "in.jsonl"), "--collection", str(coll), "--recipe", "cropping",
                 "--out", str(tmp_path / "out.jsonl"), "--url", opensearch_url, "--index", index_name,
                 "--keep", "3"])
    assert code == 0
    (rec,) = read_records(tmp_path / "out.jsonl")
    assert rec.negative_ids == ("d",)  # the only other document sharing a term
    assert rec.negatives[0] in DOCS["d"].full  # a cropped span of it
    assert not os_client.indices.exists(index=index_name)


def test_cli_names_the_missing_node(tmp_path, capsys):
    write_records(tmp_path / "in.jsonl", [TrainRecord("q", ("x",))])
    coll = tmp_path / "coll"
    coll.mkdir()
    with gzip.open(coll / "corpus.jsonl.gz", "wt") as f:
        f.write(json.dumps({"_id": "1", "title": "t", "text": "x"}) + "\n")
    code = main(["--records", str(tmp_path / "in.jsonl"), "--collection", str(coll), "--recipe", "qrels",
                 "--out", str(tmp_path / "o.jsonl"), "--url", "http://127.0.0.1:9"])
    assert code == 1
    assert "no OpenSearch node answers at http://127.0.0.1:9" in capsys.readouterr().err
