"""What a model's tokens cost, in US dollars, from the genai-prices package.

A price is known where the model declares itself free (in-process llama.cpp), or where
genai-prices knows both the model and who bills it: the provider the model declares, or
else the one its endpoint's URL names (api.openai.com is OpenAI). Anything else, a local
server or a proxy it cannot place, is unknown: the cost is then None, never 0, since a
guessed provider (any "gpt-4o" served by vLLM) would bill tokens nobody pays for.

genai-prices is imported on the first price asked of a model that may have one (it takes
about a quarter of a second): never at import, and never for a scripted or free model.
"""

from __future__ import annotations

import functools

from .models import Capabilities, Model
from .usage import Usage


class Price:
    """The price of one model's tokens; `cost` is None for every usage when it is unknown."""

    def __init__(self, caps: Capabilities):
        self.free = caps.free
        self.model = caps.name
        self._where = _where(caps)

    @functools.cached_property
    def known(self) -> bool:
        return self.free or (self._where is not None and _lookup(self.model, *self._where))

    def cost(self, usage: Usage) -> float | None:
        """What `usage` cost: cached input tokens at their own price where the endpoint
        reported them (OpenAI's prompt_tokens_details.cached_tokens)."""
        if self.free:
            return 0.0
        if not self.known:
            return None
        return _calc(self.model, *self._where, usage.prompt_tokens, usage.completion_tokens,
                     usage.cached_tokens)

    def priced(self, usage: Usage) -> Usage:
        """`usage` with its cost filled in (the backend reports tokens, not money)."""
        if usage.cost is not None:
            return usage
        cost = self.cost(usage)
        return usage if cost is None else usage.model_copy(update={"cost": cost})

    def input_cost(self, tokens: int) -> float | None:
        """What a request of `tokens` prompt tokens will cost before its reply: what a cost
        limit checks before sending it."""
        return self.cost(Usage(prompt_tokens=tokens)) if tokens else 0.0


def _where(caps: Capabilities) -> tuple[str | None, str | None] | None:
    """(provider id, endpoint URL) to find the price by, or None when nothing can place it."""
    if caps.provider:
        return caps.provider, None
    if caps.base_url:
        return None, caps.base_url
    return None


@functools.lru_cache(maxsize=64)
def _lookup(model: str, provider: str | None, url: str | None) -> bool:
    from genai_prices import Usage as Tokens, calc_price

    try:
        calc_price(Tokens(input_tokens=0, output_tokens=0), model, provider_id=provider,
                   provider_api_url=url)
    except LookupError:
        return False
    return True


def _calc(model: str, provider: str | None, url: str | None, prompt: int, completion: int,
          cached: int) -> float:
    from genai_prices import Usage as Tokens, calc_price

    # genai-prices counts cache reads within input_tokens, as OpenAI's prompt_tokens does
    tokens = Tokens(input_tokens=prompt, output_tokens=completion,
                    **({"cache_read_tokens": min(cached, prompt)} if cached else {}))
    price = calc_price(tokens, model, provider_id=provider, provider_api_url=url)
    return float(price.total_price)


def known_or_refused(model: Model, limit: float) -> None:
    """A cost limit on a model whose price is unknown would never be reached: refuse it. A
    fallback model's every model may answer, so each one's price must be known."""
    from .models.fallback import each

    for caps in each(model):
        if not Price(caps).known:
            from .errors import ConfigError

            where = f"provider {caps.provider}" if caps.provider else \
                caps.base_url or "no endpoint"
            raise ConfigError(f"a cost limit (${limit:g}) needs the model's price, and "
                              f"genai-prices does not know {caps.name!r} at {where}: declare "
                              "its provider, or limit tokens instead")
