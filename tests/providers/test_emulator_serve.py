"""``python -m providers.emulators.serve``: its fault switch, from flags or the environment, reaching every emulator."""

from __future__ import annotations

import pytest

pytest.importorskip("aliyunsdkcore", reason="the emulators need the cloud SDKs: pip install '.[clouds]'")
pytest.importorskip("tencentcloud.cvm.v20170312", reason="the emulators need the cloud SDKs: pip install '.[clouds]'")

from providers.emulators.faults import FAULT_KINDS, FaultPlan  # noqa: E402
from providers.emulators.serve import parse_args, start_emulators  # noqa: E402


def test_no_flag_and_no_variable_means_no_faults() -> None:
    plan = parse_args([], {}).faults

    assert plan == FaultPlan(rate=0.0, seed=0, kinds=FAULT_KINDS)
    assert plan.dice().draw("RunInstances") is None


def test_flags_set_the_plan() -> None:
    plan = parse_args(["--fault-rate", "0.1", "--fault-seed", "42", "--fault-kinds", "throttle,lost",
                       "--fault-actions", "RunInstances"], {}).faults

    assert (plan.rate, plan.seed, plan.kinds, plan.actions) == (0.1, 42, ("throttle", "lost"), ("RunInstances",))


def test_the_environment_sets_the_plan_and_flags_win() -> None:
    env = {"GPUSCHED_EMULATOR_FAULT_RATE": "0.25", "GPUSCHED_EMULATOR_FAULT_SEED": "9",
           "GPUSCHED_EMULATOR_FAULT_KINDS": "5xx+timeout"}

    from_env = parse_args([], env).faults
    flagged = parse_args(["--fault-rate", "0.5"], env).faults

    assert (from_env.rate, from_env.seed, from_env.kinds) == (0.25, 9, ("5xx", "timeout"))
    assert (flagged.rate, flagged.seed) == (0.5, 9)


@pytest.mark.parametrize(
    ("argv", "env", "says"),
    [
        (["--fault-rate", "1.5"], {}, "between 0 and 1"),
        (["--fault-rate", "often"], {}, "not a number"),
        ([], {"GPUSCHED_EMULATOR_FAULT_RATE": "-1"}, "between 0 and 1"),
        (["--fault-rate", "0.1", "--fault-kinds", "meteor"], {}, "unknown fault kind 'meteor'"),
    ],
)
def test_a_bad_value_is_refused_with_a_clear_message(argv: list[str], env: dict[str, str], says: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parse_args(argv, env)

    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_the_same_seed_deals_the_same_faults() -> None:
    def deal(seed: int) -> list[str | None]:
        dice = FaultPlan(rate=0.3, seed=seed).dice()
        return [dice.draw("DescribeInstances") for _ in range(200)]

    assert deal(3) == deal(3)
    assert deal(3) != deal(4)
    dealt = [f for f in deal(3) if f]
    assert 30 <= len(dealt) <= 90 and set(dealt) == set(FAULT_KINDS)


def test_a_plan_for_some_actions_leaves_the_others_alone() -> None:
    dice = FaultPlan(rate=1.0, kinds=("lost",), actions=("RunInstances",)).dice()

    assert [dice.draw("DescribeInstances") for _ in range(5)] == [None] * 5
    assert dice.draw("RunInstances") == "lost"
    assert dice.drawn == {"lost": 1}


def test_every_emulator_it_starts_fails_calls_as_the_plan_deals() -> None:
    args = parse_args(["--alibaba-port", "0", "--tencent-port", "0", "--huawei-port", "0",
                       "--fault-rate", "0.2", "--fault-seed", "5", "--fault-kinds", "lost"], {})
    emulators = start_emulators(args)
    try:
        plans = {type(e).__name__: e.faults.plan for e in emulators}
    finally:
        for emulator in emulators:
            emulator.close()

    assert set(plans) == {"AlibabaEcsEmulator", "TencentCvmEmulator", "HuaweiEcsEmulator"}
    assert all(plan == FaultPlan(rate=0.2, seed=5, kinds=("lost",)) for plan in plans.values()), plans
