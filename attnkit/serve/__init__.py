"""``attnkit serve``: an HTTP API over one checkpoint, with dynamic batching.

* ``model_host``: the model's operations (translate, generate, fill-mask, explorer
  payloads), no web framework; what differs by kind is its role (``model_roles``);
* ``batcher``: one worker thread owns the model; compatible translation
  requests are decoded as one batch;
* ``limits``: body size and read-time guards in front of the app;
* ``routes``: one FastAPI router per kind of checkpoint (translation, language
  model with the OpenAI routes, encoder tasks, summarization), each owning the
  batch kinds it submits;
* ``app``: the app built from the routers the engine offers, one-line JSON errors.

Needs the ``serve`` extra (``pip install 'attnkit[serve]'``: FastAPI, uvicorn).
See ``docs/serving.md``.
"""
