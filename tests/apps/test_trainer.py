"""Trainer: config, records, sampler, collation, pairs, training, resume and export.

Tiny random models built from configs (trainer_support), CPU, a few seconds each.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from trainer_support import (
    TINY_CONFIG,
    tiny_bert_dir,
    tiny_llama_dir,
    tiny_overrides,
    write_tiny_records,
)

from lr_opensearch.errors import ConfigError, TrainingError
from trainer.batching import Collator
from trainer.checkpoint import checkpoint_dirs, trainable_parameters
from trainer.config import TrainConfig, format_instruction, load_config, micro_batch_size
from trainer.data import BatchSampler, Example, Source, TrainRecord, read_records, write_records
from trainer.train import Trainer

CONFIGS = Path(__file__).resolve().parents[2] / "trainer" / "configs"


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    return tiny_bert_dir(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    return write_tiny_records(tmp_path_factory.mktemp("data") / "tiny.jsonl")


def _config(model_dir: Path, records: Path, out: Path, **extra: object) -> TrainConfig:
    return load_config(TINY_CONFIG, tiny_overrides(model_dir, records, out, **extra))


# ----------------------------------------------------------------------------- config


def test_paper_defaults():
    for config in (TrainConfig(), load_config(CONFIGS / "paper.yaml")):
        assert config.run.batch_size == 128 and config.run.steps == 12000
        assert config.data.negatives == 7 and config.data.max_length == 512
        assert config.loss.temperature == 0.02
        assert (config.lora.r, config.lora.alpha, config.lora.dropout) == (16, 32, 0.1)
        assert (config.loss.flops_max, config.loss.flops_warmup_steps) == (1e-3, 4000)
        assert config.loss.cross_device_negatives
    paper = load_config(CONFIGS / "paper.yaml")  # the headline setting trains with KL alignment
    assert paper.loss.kl_weight > 0 and paper.loss.symmetric_weight > 0


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown setting\(s\) \['lrr'\]; valid: \['lr'"):
        load_config(None, ["optim.lrr=1"])
    with pytest.raises(ConfigError, match="run.steps: expected an integer"):
        load_config(None, ["run.steps=1.5"])
    cfg = load_config(None, ["run.batch_size=6", "run.grad_accum=4"])
    with pytest.raises(ConfigError, match="not divisible"):
        micro_batch_size(cfg, world_size=1)
    assert micro_batch_size(load_config(None, ["run.batch_size=8", "run.grad_accum=2"]), 2) == 2
    assert load_config(None, ["optim.lr=2e-4"]).optim.lr == 2e-4  # YAML 1.1 reads 2e-4 as text
    assert format_instruction("Find papers") == "Instruct: Find papers\nQuery: "
    assert format_instruction(None) == ""


def test_shipped_configs_load():
    for name in ("paper.yaml", "tiny-cpu.yaml", "minilm-cpu.yaml", "smollm2-cpu.yaml"):
        config = load_config(CONFIGS / name)
        assert config.run.steps >= 1, name


# ----------------------------------------------------------------------------- data


def test_records_round_trip_and_errors(tmp_path):
    recs = [TrainRecord("q", ("p",), ("n1", "n2"), "inst", ("d1",), ("d2", "d3"))]
    write_records(tmp_path / "r.jsonl.gz", recs)
    assert read_records(tmp_path / "r.jsonl.gz") == recs
    (tmp_path / "bad.jsonl").write_text('{"query": "q", "positives": ["p"]}\n{"query": ""}\n')
    with pytest.raises(TrainingError, match=r"bad.jsonl:2: 'query' must be a non-empty string"):
        read_records(tmp_path / "bad.jsonl")


def test_sampler_is_deterministic_and_groups_are_well_formed():
    a = [TrainRecord(f"a{i}", (f"pa{i}",), tuple(f"na{i}_{j}" for j in range(i % 3))) for i in range(12)]
    b = [TrainRecord(f"b{i}", (f"pb{i}",)) for i in range(8)]
    sources = [Source("a", a, 3.0), Source("b", b, 1.0, instruction="find b")]
    s1 = BatchSampler(sources, batch_size=4, negatives=2, seed=5)
    s2 = BatchSampler(sources, batch_size=4, negatives=2, seed=5)
    assert s1.batch(17) == s2.batch(17)  # a fresh sampler jumps straight to batch 17
    assert s1.batch(3) != s1.batch(4)
    drawn = [s1.batch(i) for i in range(400)]
    share_a = sum(batch[0].source == "a" for batch in drawn) / len(drawn)
    assert 0.65 < share_a < 0.85  # weights 3:1
    for batch in drawn[:50]:
        assert len({e.source for e in batch}) == 1  # homogeneous
        assert len({e.query for e in batch}) == 4  # no record twice in a batch
        for e in batch:
            assert len(e.docs) == 3
            assert e.docs[0] == "p" + e.query  # positive first
            assert "p" + e.query not in e.docs[1:]  # never its own positive as a negative
            assert e.instruction == ("find b" if e.source == "b" else None)


def test_collator_counts_and_framing(bert_dir):
    from tokenizers import Tokenizer

    from lr_opensearch.model import LightRetrieverModel, RetrieverSettings

    model = LightRetrieverModel.from_pretrained(bert_dir, RetrieverSettings(pooling="mean"))
    tok = Tokenizer.from_file(str(bert_dir / "tokenizer.json"))
    col = Collator(tok, model.framing, model.vocab_size, max_length=12, query_max_tokens=5)
    ex = [Example("tower tower [SEP] paris", "Find it", ("paris tower " * 20, "heat"), "s"),
          Example("heat", None, ("heat transfer", "paris"), "s")]
    batch = col(ex)
    tower, paris = tok.token_to_id("tower"), tok.token_to_id("paris")
    assert batch.query_tokens[0] == [tower, tower, paris]  # [SEP] dropped, repeats kept
    assert batch.counts[0, tower] == 2 and batch.counts[0, paris] == 1 and batch.counts[0].sum() == 3
    assert batch.doc_ids.shape == (4, 12) and batch.doc_mask[0].sum() == 12  # truncated to 12
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    prompt = tok.encode("Instruct: Find it\nQuery: ", add_special_tokens=False).ids
    assert batch.prompts[0] == prompt and batch.prompts[1] == []
    n = int(batch.sym_mask[0].sum())
    assert batch.sym_ids[0, :n].tolist() == [cls, *prompt, tower, tower, paris, sep]
    assert batch.group == 2


# ----------------------------------------------------------------------------- pairs


def _beir(tmp_path: Path, train: str, test: str) -> Path:
    import gzip

    base = tmp_path / "beir"
    (base / "qrels").mkdir(parents=True)
    docs = [{"_id": "d1", "title": "Wing lift", "text": "Wing lift. The lift of a wing at high speed grows"},
            {"_id": "d2", "title": "Paris", "text": "Paris is the capital of France and has a tower"}]
    with gzip.open(base / "corpus.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(d) + "\n" for d in docs)
    with gzip.open(base / "queries.jsonl.gz", "wt") as f:
        f.writelines(json.dumps({"_id": q, "text": f"query {q}"}) + "\n" for q in ("1", "2", "3"))
    (base / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + train)
    (base / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + test)
    return base


def test_pairs_use_train_qrels_only(tmp_path):
    from trainer.pairs import qrels_records, read_corpus

    base = _beir(tmp_path, "1\td1\t1\n2\td2\t0\n", "3\td2\t1\n")
    docs = read_corpus(base)
    recs = qrels_records(base, docs)
    assert [(r.query, r.positive_ids) for r in recs] == [("query 1", ("d1",))]
    with pytest.raises(TrainingError, match="test split is never used"):
        qrels_records(base, docs, split="test")
    leaky = _beir(tmp_path / "leaky", "1\td1\t1\n3\td2\t1\n", "3\td2\t1\n")
    with pytest.raises(TrainingError, match="also test queries"):
        qrels_records(leaky, read_corpus(leaky))


def test_title_body_and_cropping(tmp_path):
    from trainer.pairs import cropping_records, read_corpus, title_body_records

    docs = read_corpus(_beir(tmp_path, "1\td1\t1\n", "3\td2\t1\n"))
    tb = {r.positive_ids[0]: r for r in title_body_records(docs, min_title_words=1, min_body_words=3)}
    assert tb["d1"].query == "Wing lift"
    assert tb["d1"].positives == ("The lift of a wing at high speed grows",)  # repeated title removed
    crops = cropping_records(docs, seed=3, query_words=(2, 3), min_words=5)
    assert crops == cropping_records(docs, seed=3, query_words=(2, 3), min_words=5)
    for r in crops:
        full = docs[r.positive_ids[0]].full
        assert r.query in full and r.positives[0] in full and 2 <= len(r.query.split()) <= 3


def test_select_negatives_skips_positives():
    from trainer.mine_negatives import select_negatives

    ranked = ["p", "a", "b", "p2", "c", "d"]
    assert select_negatives(ranked, {"p", "p2"}, skip=1, keep=2) == ["b", "c"]


# ----------------------------------------------------------------------------- training


def _fixed_batch_loss(trainer: Trainer) -> float:
    batch = trainer.collator(trainer.sampler.batch(0))
    trainer.model.eval()
    with torch.no_grad():
        loss, _ = trainer.objective(trainer.forward(batch), step=0)
    trainer.model.train()
    return float(loss)


@pytest.mark.parametrize("tuning", [{}, {"lora.enabled": False, "optim.lr": 0.002}], ids=["lora", "full"])
def test_a_few_steps_reduce_the_loss(bert_dir, records, tmp_path, tuning):
    # a source of exactly one micro-batch with every negative used: the same batch each step
    few = tmp_path / "four.jsonl"
    write_records(few, read_records(records)[:4])
    config = _config(bert_dir, few, tmp_path / "run", **{"run.steps": 12, "run.save_every": 0,
                                                          "data.negatives": 3, "loss.kl_weight": 0,
                                                          **tuning})
    trainer = Trainer(config)
    before = _fixed_batch_loss(trainer)
    trainer.run()
    after = _fixed_batch_loss(trainer)
    assert after < 0.8 * before, (before, after)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == list(range(1, 13))
    assert {"dense", "sparse", "sparse/flops", "symmetric", "loss", "lr"} <= set(lines[0])


def test_resume_continues_identically(bert_dir, records, tmp_path):
    extra = {"run.save_every": 2, "lora.dropout": 0.1}
    straight = Trainer(_config(bert_dir, records, tmp_path / "a", **{"run.steps": 4, **extra}))
    straight.run()
    first = Trainer(_config(bert_dir, records, tmp_path / "b", **{"run.steps": 2, **extra}))
    first.run()
    resumed = Trainer(_config(bert_dir, records, tmp_path / "b", **{"run.steps": 4, **extra}))
    resumed.maybe_resume()
    assert resumed.step == 2
    resumed.run()
    assert resumed.step == 4
    a, b = trainable_parameters(straight.model), trainable_parameters(resumed.model)
    assert list(a) == list(b)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert [p.name for p in checkpoint_dirs(tmp_path / "b")] == ["step-2", "step-4"]


def test_wall_clock_budget_stops_and_checkpoints(bert_dir, records, tmp_path):
    trainer = Trainer(_config(bert_dir, records, tmp_path / "run",
                              **{"run.steps": 50, "run.save_every": 0, "run.max_wall_minutes": 0}))
    result = trainer.run()
    assert result.step == 1 and result.checkpoint is not None and result.checkpoint.name == "step-1"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["steps"], summary["planned_steps"]) == (1, 50)


def _export_matches(model_dir: Path, records: Path, tmp_path: Path, instruction: str | None,
                    **extra: object) -> None:
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.model import DocEncoder
    from lr_opensearch.query import QueryEncoder
    from trainer.export import export_model

    instructions = f"{{default: '{instruction or ''}'}}"
    config = _config(model_dir, records, tmp_path / "run", **{"export.instructions": instructions, **extra})
    trainer = Trainer(config)
    query, doc = "boundary layer heat transfer", "heat transfer in a laminar boundary layer"
    prompt = trainer.collator.prompt_ids(instruction)
    tokens = trainer.collator.query_ids([query])

    def outputs() -> tuple[torch.Tensor, torch.Tensor]:
        trainer.model.eval()
        with torch.no_grad():
            q = trainer.model.encode_query_dense(prompt, tokens)[0]
            framed = trainer.collator([Example(query, instruction, (doc,), "x")])
            d = trainer.model.encode_documents(framed.doc_ids, framed.doc_mask).dense[0]
        trainer.model.train()
        return q, d

    q0, _ = outputs()
    trainer.run()
    q1, d1 = outputs()
    assert (q1 - q0).abs().max() > 1e-3  # training changed the query side
    bundle = load_bundle(export_model(trainer.model, trainer.tokenizer, config, tmp_path / "bundle"))
    served = QueryEncoder(bundle).encode(query).dense
    assert bundle.config.query_norm == config.model.query_norm == trainer.model.query_norm
    if bundle.config.normalize and bundle.config.query_norm == "mean":
        served = served / np.linalg.norm(served)  # the mean's norm: the same ranking
    np.testing.assert_allclose(served, q1.numpy(), rtol=2e-3, atol=2e-3)  # float16 table rows
    docs = DocEncoder.from_bundle(bundle).encode([doc])
    np.testing.assert_allclose(docs.dense[0], d1.numpy(), rtol=1e-4, atol=1e-5)  # merged LoRA


def test_export_bundle_matches_the_trained_encoder(bert_dir, records, tmp_path):
    _export_matches(bert_dir, records, tmp_path, instruction=None, **{"run.steps": 3})


def test_export_decoder_with_instruction(records, tmp_path):
    llama = tiny_llama_dir(tmp_path)
    _export_matches(llama, records, tmp_path, instruction="Find passages",
                    **{"run.steps": 3, "model.pooling": "last", "model.normalize": False,
                       "loss.temperature": 1.0})


def test_export_cli_from_a_run_directory(bert_dir, records, tmp_path):
    from lr_opensearch.bundle import load_bundle
    from trainer.export import main as export_main

    Trainer(_config(bert_dir, records, tmp_path / "run", **{"run.steps": 2})).run()
    assert export_main(["--checkpoint", str(tmp_path / "run"), "--out", str(tmp_path / "b"),
                        "--set", "export.served_dim=16"]) == 0
    bundle = load_bundle(tmp_path / "b")
    assert bundle.config.served_dim == 16 and bundle.table().shape[1] == 32


def test_train_cli_reports_bad_config(caplog):
    from trainer.train import main as train_main

    assert train_main(["--config", str(TINY_CONFIG), "--set", "run.precision=fp8"]) == 1
    assert "run.precision must be 'fp32' or 'bf16', got 'fp8'" in caplog.text


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_export_cli_fits_the_table_after_training(bert_dir, records, tmp_path):
    """``--fit-corpus``: the trained model's table is fitted to its own query embeddings."""
    from tiny_artifacts import SENTENCES

    from lr_opensearch.bundle import load_bundle
    from trainer.export import main as export_main

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "title": s.split(" ")[0], "text": s})
                              + "\n" for i, s in enumerate(SENTENCES * 3)))
    Trainer(_config(bert_dir, records, tmp_path / "run", **{"run.steps": 2})).run()
    assert export_main(["--checkpoint", str(tmp_path / "run"), "--out", str(tmp_path / "b"),
                        "--fit-corpus", str(corpus)]) == 0
    bundle = load_bundle(tmp_path / "b")
    fit = bundle.fit
    assert fit is not None and bundle.sparse_weights_kind == "idf"
    assert fit["corpora"][0]["name"] == "corpus.jsonl"
    table = fit["tables"]["default"]
    assert table["holdout_cosine"] > table["holdout_cosine_e0"]  # the fit helped the trained model
