"""The live view of a run on the command line: ``watch``, ``answer``, and what ``run --wait``
and ``chat`` show while a run works.

    treadle watch ID [--from-start | --from OFFSET] [--json] [--interactive]
                               [--allow-reads] [--env NAME]... [--no-answer | --decline-queries]
    treadle answer ID QUERY_ID TEXT            # TEXT "-" reads standard input
    treadle answer ID QUERY_ID --decline REASON

The run's stream is read with ``AgentClient.watch`` (queries: nothing is added to the run's
history), and everything the view does to the run goes through ``treadle.client``. On a
terminal a status line (state, step, tokens, elapsed) stays at the bottom while the model's text
and the tool lines scroll above it; piped, or with ``--json``, every item is one JSON object per
line on standard output (``topic`` and ``offset`` added; a token batch's own character offset is
``text_offset``) and nothing else is written there.

The view also answers: ``--interactive`` asks right there about a call waiting for approval
(approve / reject with a reason / modify) or a stuck run (guide / halt), through the ``decide``
update; client queries are answered through ``answer_query`` by the policy in
``client_answers`` (file reads with consent or ``--allow-reads``, never a secret-looking file
without consent; ``--env`` variables; questions to the user), unless ``--no-answer`` leaves them
to another client. What waits is always read from the run's ``state`` query, never from an
event (anyone who may signal the run can publish on its stream). A query no one here can be
asked about, and no flag answers, is left to another client (saying so), so several clients can
watch one run; ``--decline-queries`` declines it instead.

A retried model call streams its text again: the terminal view shows only what goes past the
text already shown, or, when the new attempt says something else, ``RETRIED`` and its text from
the start.

The modules, one concept each (what every face shares, the model text already shown and a
client query in words, is ``treadle.client``'s: ``text``, ``describe``): ``lines`` (an event as
a line, an item as JSON), ``views`` (terminal, JSON lines, quiet), ``responder`` (asking the user
and answering the run), ``options`` (the flags that say what this client answers), ``follow``
(following a run), ``commands`` (``watch`` and ``answer``).
"""

from __future__ import annotations

from treadle.cli.live.commands import register
from treadle.cli.live.follow import follow, show_run
from treadle.cli.live.lines import event_text, item_json
from treadle.cli.live.options import add_client_options, responder_for, warn_secret_env
from treadle.cli.live.responder import Prompter, Responder
from treadle.cli.live.views import JsonView, QuietView, TerminalView, View

# ``treadle demo`` waits for its run's result with this (``AgentClient.result`` is the same,
# by a run's id); one implementation, the client's.
from treadle.client.runs import outcome

__all__ = [
    "JsonView",
    "Prompter",
    "QuietView",
    "Responder",
    "TerminalView",
    "View",
    "add_client_options",
    "event_text",
    "follow",
    "item_json",
    "outcome",
    "register",
    "responder_for",
    "show_run",
    "warn_secret_env",
]
