"""An operator's approved amount: absent means as asked; zero or less is refused, not read as absent."""

from __future__ import annotations

import pytest

from services.cli.main import main
from services.governance.core.quota import DecisionError, decide

from .builders import a_history

pytestmark = pytest.mark.timeout(30)


def asked(amount: int):  # type: ignore[no-untyped-def]
    return a_history().request("qr-1", amount).state().requests["qr-1"].submitted


def test_an_absent_amount_grants_what_was_asked_and_a_smaller_one_grants_that() -> None:
    assert decide(asked(4000), approve=True, by="ops").approved_amount == 4000  # type: ignore[union-attr]
    assert decide(asked(4000), approve=True, by="ops", approved_amount=1).approved_amount == 1  # type: ignore[union-attr]


@pytest.mark.parametrize("amount", [0, -1])
def test_an_amount_of_zero_or_less_is_refused_rather_than_granting_everything(amount: int) -> None:
    with pytest.raises(DecisionError, match="at least 1"):
        decide(asked(4000), approve=True, by="ops", approved_amount=amount)


@pytest.mark.parametrize("amount", ["0", "-1", "lots"])
def test_the_command_refuses_such_an_amount_naming_the_option(amount: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["gov", "quota", "approve", "q2", f"--amount={amount}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --amount:" in err and "Traceback" not in err
