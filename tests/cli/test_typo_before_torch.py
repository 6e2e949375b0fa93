"""A typo in a strategy, task, model name or --set field is reported before torch or transformers is imported
(each case in a fresh process: the one-line error, exit 2, neither library in sys.modules)."""

from __future__ import annotations

import pytest

from benchmarks.bench_typo import CASES, typo_result

EXPECTED = {"strategy": "Did you mean 'kimera'", "task": "Did you mean 'capr'", "model": "Did you mean 'minilm'",
            "--set field": "Did you mean 'learning_rate'", "--set strategy field": "Did you mean 'tau'",
            "--set hook field": "Did you mean 'enabled'"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_typo_is_reported_before_torch_loads(case):
    result = typo_result(CASES[case])
    assert result["code"] == 2, result
    assert EXPECTED[case] in result["stderr"] and "Traceback" not in result["stderr"], result["stderr"]
    assert result["imported"] == [], f"{case}: {result['imported']} imported before the error"
