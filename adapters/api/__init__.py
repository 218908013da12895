"""``ctxledger api``: a JSON service over the engine under ``/v1/``, for orchestrators in any
language, over HTTP (``app``) or JSON lines on stdin/stdout (``stdio``); both transports call one
``service.ApiService``. Bodies are the msgspec types of ``types``; ``/v1/openapi.json`` is
generated from them (``openapi``); ``Idempotency-Key`` answers are kept by ``idempotency``."""
