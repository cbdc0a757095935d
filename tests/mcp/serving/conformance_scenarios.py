"""The conformance suite's server scenarios that apply to a server of tarry tools.

The others are listed, with why, on the docs page "tarry as an MCP server".
"""

SCENARIOS = [
    "server-initialize",
    "server-session-lifecycle",
    "ping",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-error",
    "tools-call-elicitation",
    "tools-call-with-progress",
    "json-schema-2020-12",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
    "dns-rebinding-protection",
    "http-header-validation",
    "server-sse-multiple-streams",
    "server-sse-polling",
    "input-required-result-basic-elicitation",
    "input-required-result-request-state",
    "input-required-result-tampered-state",
    "input-required-result-result-type",
    "input-required-result-missing-input-response",
    "input-required-result-ignore-extra-params",
    "input-required-result-validate-input",
    "input-required-result-unsupported-methods",
    "input-required-result-multi-round",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-required-task-error",
]
