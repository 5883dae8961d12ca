"""``lr inspect`` in a real browser: headless Chromium (Debian's chromium + chromium-driver,
installed by scripts/setup.sh) driven by Selenium against the inspector serving a real
index on the node: the four lists, the slider re-fusing, the error cases. A screenshot goes
to results/inspect.png."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import browser_support
import pytest
from corpus_support import random_docs, tiny_vocab
from node_support import free_port
from tiny_artifacts import SENTENCES, tiny_bundle, wordpiece_tokenizer

from lr_opensearch.bundle import load_bundle
from lr_opensearch.engine.opensearch import OpenSearchAdapter

pytestmark = pytest.mark.node
REPO = Path(__file__).resolve().parents[2]
QUERY = "boundary layer heat transfer flow"


@pytest.fixture(scope="module")
def corpus(os_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    tok = wordpiece_tokenizer(padding=False)
    path = tiny_bundle(tmp_path_factory.mktemp("inspect") / "b", tok, seed=3,
                       weights={"dense": 0.4, "sparse": 0.2, "bm25": 0.4})
    bundle = load_bundle(path)
    vocab = tiny_vocab(tok)
    index = f"lr-test-inspect-{uuid.uuid4().hex[:8]}"
    OpenSearchAdapter(os_client).create_index(index, bundle)
    ops: list[dict[str, Any]] = []
    for i, doc in enumerate(random_docs(7, 40, vocab)):
        ops += [{"index": {"_index": index, "_id": f"d{i:02d}"}},
                {"lr_dense": doc.dense.tolist(), "lr_sparse": doc.sparse,
                 "title": f"doc {i} {' '.join(doc.tokens[:3])}",
                 "text": SENTENCES[i % len(SENTENCES)]}]
    assert not os_client.bulk(body=ops, refresh=True)["errors"]
    yield path, index
    os_client.indices.delete(index=index, ignore_unavailable=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = browser_support.chromium()
    try:
        yield driver
    finally:
        driver.quit()


def _wait_error(browser: Any) -> str:
    from selenium.webdriver.support.ui import WebDriverWait

    box = browser.find_element("id", "error")
    WebDriverWait(browser, 30).until(lambda d: box.is_displayed() and box.text)
    return str(box.text)


def _set_slider(browser: Any, value: float) -> None:
    browser.execute_script(
        "const s = document.getElementById('dense'); s.value = arguments[0];"
        "s.dispatchEvent(new Event('input'));", str(value))


def test_the_page_shows_four_lists_and_the_slider_refuses(browser: Any, corpus: Any,
                                                          opensearch_url: str) -> None:
    from lr_opensearch.inspect import create_app

    bundle, index = corpus
    server = browser_support.Server(create_app(str(bundle), index, url=opensearch_url))
    try:
        browser.get(server.url)
        assert index in browser.title and index in browser.find_element("id", "index").text
        browser.find_element("id", "q").send_keys(QUERY)
        browser.find_element("id", "go").click()
        browser_support.wait_rendered(browser, 1)
        lists = {mode: browser_support.list_ids(browser, mode)
                 for mode in ("hybrid", "dense", "sparse", "bm25")}
        assert all(0 < len(ids) <= 10 for ids in lists.values()), lists
        assert browser.find_elements("css selector", "#tokens tbody tr")  # the query tokens
        assert "fused" in browser.find_element("css selector", "#list-hybrid li").text
        shot = REPO / "results" / "inspect.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(shot))
        _set_slider(browser, 1.0)  # all weight on the dense leg: the dense list's order
        browser_support.wait_rendered(browser, 2)
        all_dense = browser_support.list_ids(browser, "hybrid")
        assert all_dense == lists["dense"]
        assert "dense 1.00" in browser.find_element("id", "weights").text
        _set_slider(browser, 0.0)  # none on it: sparse and BM25 decide
        browser_support.wait_rendered(browser, 3)
        no_dense = browser_support.list_ids(browser, "hybrid")
        assert no_dense != all_dense  # the fused order moved with the slider
        # an empty query: a message on the page, the lists as they were
        browser.find_element("id", "q").clear()
        browser.find_element("id", "go").click()
        assert "query is empty" in _wait_error(browser)
    finally:
        server.close()


@pytest.mark.parametrize("case", ["unknown index", "another bundle", "node down"])
def test_errors_show_a_message_never_a_stack_trace(browser: Any, corpus: Any,
                                                   opensearch_url: str, case: str,
                                                   tmp_path: Path) -> None:
    from lr_opensearch.inspect import create_app

    bundle, index = corpus
    if case == "unknown index":
        app, expect = create_app(str(bundle), "no-such-index", url=opensearch_url), "does not exist"
    elif case == "another bundle":
        other = tiny_bundle(tmp_path / "other", wordpiece_tokenizer(padding=False), seed=9)
        app, expect = create_app(str(other), index, url=opensearch_url), "different bundle"
    else:
        app, expect = create_app(str(bundle), index, url=f"http://127.0.0.1:{free_port()}"), \
            "did not answer"
    server = browser_support.Server(app)
    try:
        browser.get(server.url)
        browser.find_element("id", "q").send_keys(QUERY)
        browser.find_element("id", "go").click()
        message = _wait_error(browser)
        assert expect in message and "Traceback" not in message
        assert "Traceback" not in browser.page_source
    finally:
        server.close()


def test_the_full_model_list_when_the_document_encoder_is_there(
        os_client: Any, opensearch_url: str, tmp_path: Path) -> None:
    """A bundle with its document encoder gets a fifth list: the full model's query vector
    searched densely, the same hits as the evaluation's full-dense run gives."""
    from ingest_support import ingest_adi

    from lr_opensearch.inspect import create_app
    from lr_opensearch.model.full_model import full_query_encoder
    from lr_opensearch.search import Retriever

    index = f"lr-test-inspect-full-{uuid.uuid4().hex[:8]}"
    path = ingest_adi(tmp_path, opensearch_url, index, limit=30)
    try:
        app = create_app(str(path), index, url=opensearch_url)
        client = app.test_client()
        assert b'id="list-full_dense"' in client.get("/").data
        data = client.get("/api/search?q=computer%20information%20retrieval").get_json()
        assert set(data["lists"]) == {"hybrid", "dense", "sparse", "bm25", "full_dense"}
        bundle = load_bundle(path)
        retriever = Retriever(bundle, os_client, index)
        vector = full_query_encoder(bundle)(["computer information retrieval"])
        expected = retriever.search_encoded(vector, None, 10, mode="dense")[0]
        assert [h["id"] for h in data["lists"]["full_dense"]] == [h.doc_id for h in expected]
        assert b'id="list-full_dense"' not in create_app(str(path), index, url=opensearch_url,
                                                   full=False).test_client().get("/").data
    finally:
        os_client.indices.delete(index=index, ignore_unavailable=True)
