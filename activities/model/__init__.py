"""Model providers over httpx: the ``call_model`` activity (``activity``), one module per wire
protocol (``openai_chat``, ``anthropic_messages``) and the HTTP failures they share
(``http_errors``)."""
