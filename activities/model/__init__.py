"""Model providers over httpx: the ``call_model`` activity (``activity``), one module per wire
protocol (``openai_chat``, ``anthropic_messages``), the HTTP failures they share and the key
redaction (``http_errors``), what makes a provider's values fit for the history: valid
Unicode, sane token counts (``payload``), what streaming protocols share (``streaming``), and the
bounded publishing of a streaming call's text on the run's live stream (``tokens``)."""
