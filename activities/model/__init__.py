"""Model providers over httpx: the ``call_model`` activity (``activity``) and one module per
wire protocol (``openai_chat``, ``anthropic_messages``)."""
