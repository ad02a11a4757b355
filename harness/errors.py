"""HarnessError: the one exception a user can act on."""

from __future__ import annotations


class HarnessError(Exception):
    """A user or data error: the message names the thing, the bad value and the fix.

    ``cli.main`` prints it as ``error: <message>`` and exits 1; real bugs keep
    their traceback.
    """

    exit_code = 1


class UsageError(HarnessError):
    """Bad command-line usage (exit 2)."""

    exit_code = 2


class RegressionError(HarnessError):
    """A measured regression or SLO breach (exit 3), so CI can tell slower from broken."""

    exit_code = 3


class InconclusiveError(HarnessError):
    """A gate the measurement cannot decide: its interval reaches past the bound without a significant breach (exit 4),
    so CI can tell "cannot tell, measure longer" from "slower" (3) and "broken" (1)."""

    exit_code = 4
