"""The bytes of one request: the HTTP head, Content-Length and the JSON body for /v1/completions or chat."""

from __future__ import annotations

import hashlib

import orjson

from kvbench.http.conn import request_head
from kvbench.http.probe import auth_headers
from kvbench.http.profile import EndpointProfile
from kvbench.http.prompts import PromptBuilder
from kvbench.records import Request
from kvbench.target import RunContext
from kvbench.version import __version__


def run_salt(ctx: RunContext) -> str:
    """Per-run salt: the run directory and start instant (shared by all workers of the run)."""
    return hashlib.sha256((ctx.run_key or f"{ctx.run_dir.resolve()}|{ctx.t0_ns}").encode()).hexdigest()[:12]


class RequestBodies:
    """Builds each request's complete bytes from the endpoint profile: the head is fixed per run, the body per
    request (the prompt the PromptBuilder synthesises for it, salted per run when the profile asks)."""

    __slots__ = ("prof", "prompts", "headers", "_head", "_base")

    def __init__(self, prof: EndpointProfile, ctx: RunContext):
        self.prof = prof
        self.prompts = PromptBuilder(run_salt(ctx) if prof.salt else "", prof.word_tokens)
        self.headers = {"User-Agent": f"kvbench/{__version__}", "Accept": "text/event-stream", **auth_headers(prof)}
        self._head = request_head(prof.endpoint_url, self.headers)  # + Content-Length and the body per request
        self._base = self._base_body()

    def _base_body(self) -> dict:
        p = self.prof
        body: dict = {"model": p.model, "stream": True}
        if p.include_usage:
            body["stream_options"] = {"include_usage": True}
        if p.ignore_eos:
            body["ignore_eos"] = True
        return {**body, **p.extra_body}

    def payload(self, req: Request) -> bytes:
        """The complete HTTP request: head, Content-Length, JSON body."""
        body = self.body(req)
        return b"%sContent-Length: %d\r\n\r\n%s" % (self._head, len(body), body)

    def body(self, req: Request) -> bytes:
        n = max(1, req.output_tokens)
        b = dict(self._base)
        b["max_tokens"] = n
        if self.prof.min_tokens:
            b["min_tokens"] = n
        if self.prof.api == "chat":
            b["messages"] = self.prompts.messages(req)
        else:
            b["prompt"] = self.prompts.text(req)
        return orjson.dumps(b)
