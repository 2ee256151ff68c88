"""The gateway's routes on the coordinator: OpenAI-compatible calls, and the episodes' lifecycle.

* ``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET /v1/models``: an ``openai`` client's
  calls, its ``api_key`` being an episode's key (``Authorization: Bearer``). Refusals are the
  OpenAI error shape (``{"error": {"message", "type", "code"}}``), which the SDK raises as they are.
* ``POST /rl/episodes`` (run token, ``X-Echo2-Token``): the next episode to play — its id, key,
  base URL and example — waiting up to ``wait_s`` for the pacing window (204 if it stays shut).
* ``POST /rl/episodes/{id}/reward`` (run token): ``{"reward": r}`` ends the episode (a retry is
  applied once).

Keys and the run token are checked here, not by the coordinator's guard (the paths are
registered as carrying their own credentials): the calls are the trusted side's, never a worker's.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from collections.abc import Callable, Mapping

import pydantic
from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response

from echo2.coordinator.app import MAX_BODY_BYTES
from echo2.gateway.desk import CallsBusy, CallTimeout, GatewayDesk
from echo2.gateway.episodes import AgentEpisode, EpisodeGone
from echo2.gateway.openai_wire import ChatRequest, CompletionRequest, Refused
from echo2.net.guard import Door, Refusal, unauthorized

#: The agents' calls (an episode's key) and the episodes' lifecycle (the run token), by path prefix.
CALL_PATHS, EPISODE_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/models"), "/rl/"
#: A call's body is capped at this many bytes per token of the model's window (JSON-escaped text,
#: tool schemas and all: a token is a few characters, an escaped one six bytes each), and never
#: below :data:`MIN_CALL_BODY_BYTES`; the episodes' routes carry a few numbers (:data:`EPISODE_BODY_BYTES`).
BYTES_PER_WINDOW_TOKEN, MIN_CALL_BODY_BYTES, EPISODE_BODY_BYTES = 32, 256 * 1024, 4096
#: Seconds between two tries of a claim waiting for the pacing window to open a group.
CLAIM_POLL_S = 0.25


class RewardBody(pydantic.BaseModel):
    reward: float


def episode_json(episode: AgentEpisode, base_url: str) -> dict:
    return {"episode_id": episode.episode_id, "key": episode.key, "base_url": f"{base_url}/v1",
            "group_slot": episode.group.slot, "index": episode.index,
            "example": {"prompt": episode.example.prompt, "answer": episode.example.answer}}


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


def _bearer(authorization: str | None) -> str:
    return (authorization or "").removeprefix("Bearer ").strip()


def _trusted(token: str | None, run_token: str) -> bool:
    return token is not None and secrets.compare_digest(token.encode(), run_token.encode())


def call_body_bytes(max_context: int | None) -> int:
    """The most bytes a call's body may have: what the model's window can hold, generously."""
    return max(MIN_CALL_BODY_BYTES, BYTES_PER_WINDOW_TOKEN * (max_context or 0)) if max_context else MAX_BODY_BYTES


def gateway_doors(desk: GatewayDesk, run_token: str) -> dict[str, Door]:
    """The gateway's credentials checked before a body byte is read, its bodies capped
    (:class:`echo2.net.guard.Door`): a call needs a live episode's key, the episodes' routes the run token."""

    def episode_key(path: str, headers: Mapping[str, str]) -> Refusal | None:
        episode = desk.book.by_key.get(_bearer(headers.get("authorization")))  # a dict read: no lock needed
        if episode is None:
            return Refusal(401, "unknown episode key (Authorization: Bearer <the key POST /rl/episodes gave>)",
                           "unauthorized")
        why = desk.refusal(episode) if path != "/v1/models" and episode.over is None else None
        if why is None:
            return None
        busy = isinstance(why, CallsBusy)
        return Refusal(429 if busy else 400, str(why), "rate_limit_error" if busy else "invalid_request_error",
                       retry_after_s=1.0 if busy else None, hold_s=desk.tarpit.hold_s(episode.key))

    def run_token_only(path: str, headers: Mapping[str, str]) -> Refusal | None:  # noqa: ARG001
        return None if _trusted(headers.get("x-echo2-token"), run_token) else unauthorized("run token")

    calls = Door(episode_key, call_body_bytes(desk.settings.max_context))
    return {**{path: calls for path in CALL_PATHS}, EPISODE_PATHS: Door(run_token_only, EPISODE_BODY_BYTES)}


def gateway_router(desk: GatewayDesk, run_token: str, base_url: Callable[[], str]) -> APIRouter:
    """The routes over ``desk``; ``base_url()``: the coordinator's address, as agents reach it."""
    router = APIRouter()

    def trusted(token: str | None) -> bool:
        return _trusted(token, run_token)

    bearer = _bearer

    async def serve(request: Request, model: type[pydantic.BaseModel], authorization: str | None, handler) -> Response:
        try:
            body = model.model_validate_json(await request.body())
        except pydantic.ValidationError as error:
            first = error.errors()[0]
            return _error(400, f"{'.'.join(map(str, first['loc']))}: {first['msg']}", "invalid_request_error")
        try:
            answer = await handler(bearer(authorization), body)  # awaited on the loop: no server thread held
        except EpisodeGone as error:
            return _error(410 if "over" in str(error) else 401, str(error), "invalid_request_error")
        except Refused as error:
            return _error(400, str(error), "invalid_request_error")
        except CallsBusy as error:  # passed the door in the same instant as others: held as the door holds
            await asyncio.sleep(desk.tarpit.hold_s(bearer(authorization)))
            busy = _error(429, str(error), "rate_limit_error")
            busy.headers["Retry-After"] = "1"
            return busy
        except CallTimeout as error:
            return _error(504, str(error), "timeout")
        return JSONResponse(answer.model_dump(mode="json", exclude_none=True))

    async def claimed(wait_s: float) -> AgentEpisode | None:
        """The next episode within ``wait_s``, asked again every :data:`CLAIM_POLL_S` on the loop
        (a held claim had taken a server thread for up to a minute)."""
        deadline = time.monotonic() + wait_s
        while (episode := desk.book.claim(0.0)) is None and time.monotonic() < deadline:
            await asyncio.sleep(min(CLAIM_POLL_S, max(0.0, deadline - time.monotonic())))
        return episode

    @router.post("/v1/chat/completions")
    async def chat(request: Request, authorization: str | None = Header(None)) -> Response:
        return await serve(request, ChatRequest, authorization, desk.chat)

    @router.post("/v1/completions")
    async def completions(request: Request, authorization: str | None = Header(None)) -> Response:
        return await serve(request, CompletionRequest, authorization, desk.complete)

    @router.get("/v1/models")
    async def models(authorization: str | None = Header(None)) -> Response:
        if bearer(authorization) not in desk.book.by_key:
            return _error(401, "unknown episode key", "invalid_request_error")
        return JSONResponse({"object": "list", "data": [{"id": desk.settings.model_name, "object": "model",
                                                          "created": 0, "owned_by": "echo2"}]})

    @router.post("/rl/episodes")
    async def open_episode(wait_s: float = 30.0, x_echo2_token: str | None = Header(None)) -> Response:
        if not trusted(x_echo2_token):
            return _error(401, "X-Echo2-Token must be the run token", "invalid_request_error")
        episode = await claimed(min(max(wait_s, 0.0), 60.0))
        if episode is None:
            return Response(status_code=204, headers={"Retry-After": "1"})
        return JSONResponse(episode_json(episode, base_url()))

    @router.post("/rl/episodes/{episode_id}/reward")
    async def reward(episode_id: str, body: RewardBody, x_echo2_token: str | None = Header(None)) -> Response:
        if not trusted(x_echo2_token):
            return _error(401, "X-Echo2-Token must be the run token", "invalid_request_error")
        if not math.isfinite(body.reward):
            return _error(400, "reward must be a finite number", "invalid_request_error")
        try:
            episode = await asyncio.to_thread(desk.book.reward, episode_id, body.reward)
        except EpisodeGone as error:
            return _error(410, str(error), "invalid_request_error")
        return JSONResponse({"episode_id": episode.episode_id, "reward": episode.reward})

    return router
