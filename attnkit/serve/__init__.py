"""``attnkit serve``: an HTTP API over one checkpoint, with dynamic batching.

* ``engine``: the model's operations (translate, generate, fill-mask, explorer
  payloads), no web framework;
* ``batcher``: one worker thread owns the model; compatible translation
  requests are decoded as one batch;
* ``limits``: body size and read-time guards in front of the app;
* ``app``: the FastAPI routes and one-line JSON errors.

Needs the ``serve`` extra (``pip install 'attnkit[serve]'``: FastAPI, uvicorn).
See ``docs/serving.md``.
"""
