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

import math
import secrets
from collections.abc import Callable

import pydantic
from fastapi import APIRouter, Header, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from echo2.gateway.desk import CallTimeout, GatewayDesk
from echo2.gateway.episodes import AgentEpisode, EpisodeGone
from echo2.gateway.openai_wire import ChatRequest, CompletionRequest, Refused

#: Path prefixes whose routes check their own credentials (:func:`echo2.coordinator.app.create_app`).
GATEWAY_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/rl/")


class RewardBody(pydantic.BaseModel):
    reward: float


def episode_json(episode: AgentEpisode, base_url: str) -> dict:
    return {"episode_id": episode.episode_id, "key": episode.key, "base_url": f"{base_url}/v1",
            "group_slot": episode.group.slot, "index": episode.index,
            "example": {"prompt": episode.example.prompt, "answer": episode.example.answer}}


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


def gateway_router(desk: GatewayDesk, run_token: str, base_url: Callable[[], str]) -> APIRouter:
    """The routes over ``desk``; ``base_url()``: the coordinator's address, as agents reach it."""
    router = APIRouter()

    def trusted(token: str | None) -> bool:
        return token is not None and secrets.compare_digest(token.encode(), run_token.encode())

    def bearer(authorization: str | None) -> str:
        return (authorization or "").removeprefix("Bearer ").strip()

    async def serve(request: Request, model: type[pydantic.BaseModel], authorization: str | None, handler) -> Response:
        try:
            body = model.model_validate_json(await request.body())
        except pydantic.ValidationError as error:
            first = error.errors()[0]
            return _error(400, f"{'.'.join(map(str, first['loc']))}: {first['msg']}", "invalid_request_error")
        try:
            answer = await run_in_threadpool(handler, bearer(authorization), body)
        except EpisodeGone as error:
            return _error(410 if "over" in str(error) else 401, str(error), "invalid_request_error")
        except Refused as error:
            return _error(400, str(error), "invalid_request_error")
        except CallTimeout as error:
            return _error(504, str(error), "timeout")
        return JSONResponse(answer.model_dump(mode="json", exclude_none=True))

    @router.post("/v1/chat/completions")
    async def chat(request: Request, authorization: str | None = Header(None)) -> Response:
        return await serve(request, ChatRequest, authorization, desk.chat)

    @router.post("/v1/completions")
    async def completions(request: Request, authorization: str | None = Header(None)) -> Response:
        return await serve(request, CompletionRequest, authorization, desk.complete)

    @router.get("/v1/models")
    def models(authorization: str | None = Header(None)) -> Response:
        if bearer(authorization) not in desk.book.by_key:
            return _error(401, "unknown episode key", "invalid_request_error")
        return JSONResponse({"object": "list", "data": [{"id": desk.settings.model_name, "object": "model",
                                                          "created": 0, "owned_by": "echo2"}]})

    @router.post("/rl/episodes")
    async def open_episode(wait_s: float = 30.0, x_echo2_token: str | None = Header(None)) -> Response:
        if not trusted(x_echo2_token):
            return _error(401, "X-Echo2-Token must be the run token", "invalid_request_error")
        episode = await run_in_threadpool(desk.book.claim, min(max(wait_s, 0.0), 60.0))
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
            episode = await run_in_threadpool(desk.book.reward, episode_id, body.reward)
        except EpisodeGone as error:
            return _error(410, str(error), "invalid_request_error")
        return JSONResponse({"episode_id": episode.episode_id, "reward": episode.reward})

    return router
