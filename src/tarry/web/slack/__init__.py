"""tarry in Slack (``pip install 'tarry[web,notify]'``): questions posted with buttons, decided from Slack.

[`SlackSender`][tarry.web.slack.SlackSender] is the notices' sender of the channel ``slack``: it posts each
question asked with Approve, Answer and Decline buttons and updates its messages once it settles.
[`create_slack_app`][tarry.web.slack.create_slack_app] is the endpoint Slack sends the clicks to.
"""

from __future__ import annotations

try:
    import aiohttp  # noqa: F401
    import slack_sdk  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the installed extras
    needed = f"pip install 'tarry[notify]' (missing: {error.name})"
    raise ImportError(f"tarry.web.slack needs the notify extra: {needed}") from error

from tarry.web.slack.interactions import PATH, PrincipalFor, create_slack_app
from tarry.web.slack.sender import SlackSender

__all__ = ["PATH", "PrincipalFor", "SlackSender", "create_slack_app"]
