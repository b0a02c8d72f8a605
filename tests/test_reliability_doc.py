"""docs/reliability.md is what tests/reliability_doc.py makes of the committed fault-test results, and
it names every test that records a result: a new fault test, or a changed result, fails here until
the doc is regenerated."""

from __future__ import annotations

from pathlib import Path

from tests import reliability_doc

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "reliability.md"


def test_the_doc_is_generated_from_the_committed_results():
    assert DOC.read_text() == reliability_doc.render(reliability_doc.load([reliability_doc.RESULTS])), (
        "docs/reliability.md is out of date: python -m tests.reliability_doc "
        "docs/reliability-results.jsonl > docs/reliability.md"
    )


def test_every_fault_test_has_a_result_in_the_doc():
    doc = DOC.read_text()
    tests = reliability_doc.fault_tests()
    assert len(tests) >= 12
    missing = [t for t in tests if f"| `{t}` |" not in doc]
    assert not missing, f"fault tests with no recorded result in docs/reliability.md: {missing}"


def test_every_fault_asked_for_is_listed_with_its_tests_or_why_not():
    doc = DOC.read_text()
    for fault, tests in reliability_doc.ASKED.items():
        assert f"| {fault} |" in doc
        assert tests or fault in reliability_doc.NOT_COVERED_WHY
        assert set(tests) <= set(reliability_doc.fault_tests()), f"{fault}: a listed test takes no results"


def test_results_are_summed_over_runs_and_bad_input_gets_its_own_table():
    fault = {
        "section": "fault",
        "test": "tests/x/test_a.py::test_f",
        "name": "the broker gone",
        "outcome": "all there",
        "produced": 10,
        "stored": 10,
        "duplicates": 1,
        "dead_lettered": 0,
        "reason": None,
        "extra": {},
    }
    bad = dict(fault, section="bad_input", test="tests/x/test_b.py::test_g[5]", name="BOM", reason="bad_json")
    text = reliability_doc.render([fault, dict(fault, duplicates=0), bad])
    assert "| the broker gone | all there; 1 of 2 runs had a duplicate | 2 | 20 | 20 | 1 | 0 | 0 |" in text
    assert "| BOM | `bad_json` | 0 | 10 | `tests/x/test_b.py::test_g` |" in text
