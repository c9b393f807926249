"""Request and response models of the OpenAI-compatible API.

Requests forbid unknown fields: a field bw24 does not implement is rejected with a 400 naming
it (errors.py), never silently ignored. Ranges follow the OpenAI API reference.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# strict: no lax coercion ("yes" -> True, 5.0 -> 5); JSON ints still pass as floats.
Strict = ConfigDict(extra="forbid", strict=True)
StopField = Annotated[str | list[Annotated[str, Field(min_length=1)]] | None,
                      Field(default=None, description="Up to 16 stop strings; the text before the first match is returned.")]


class TextPart(BaseModel):
    model_config = Strict
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = Strict
    # "developer" is OpenAI's newer name for the system role; the chat template gets "system".
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] = Field(description="A string or a list of text parts.")
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class StreamOptions(BaseModel):
    model_config = Strict
    include_usage: bool = False


class SamplingFields(BaseModel):
    """Fields shared by /v1/chat/completions and /v1/completions."""

    model_config = Strict
    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0, description="0 disables top-k.")
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=0, le=2**64 - 1)
    stop: StopField
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(default=1, ge=1, description="Only n=1 is supported.")
    user: str | None = None

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, v):
        if isinstance(v, list) and len(v) > 16:
            raise ValueError("at most 16 stop strings")
        if isinstance(v, str) and not v:
            raise ValueError("a stop string must not be empty")
        return v

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool | None = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)


class CompletionRequest(SamplingFields):
    prompt: str | list[Annotated[int, Field(ge=0)]] = Field(description="A string or a list of token ids.")
    logprobs: int | None = Field(default=None, ge=0, le=20, description="Number of top logprobs per token.")


# ---- responses ---------------------------------------------------------------------------------

class PromptTokensDetails(BaseModel):
    cached_tokens: int


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob]


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: Literal["stop", "length"]


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChatChoice]
    usage: Usage


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: Delta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: Literal["stop", "length"] | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChunkChoice]
    usage: Usage | None = None


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length"] | None = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "bw24"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class TokenizeRequest(BaseModel):
    model_config = Strict
    model: str | None = None
    content: str | None = Field(default=None, description="Raw text to tokenize.")
    messages: list[ChatMessage] | None = Field(
        default=None, description="Chat messages, rendered with the chat template and the generation prompt.")
    add_special: bool = Field(default=True, description="Add BOS (content only).")


class TokenizeResponse(BaseModel):
    tokens: list[int]
    count: int
    max_model_len: int


class DetokenizeRequest(BaseModel):
    model_config = Strict
    model: str | None = None
    tokens: list[Annotated[int, Field(ge=0)]]


class DetokenizeResponse(BaseModel):
    prompt: str


class Health(BaseModel):
    status: Literal["ok"]
    model: str
    backend: str


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    error: ErrorDetail
