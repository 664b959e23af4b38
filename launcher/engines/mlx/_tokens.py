"""Tokenizer access for the MLX engine: encode/decode through the model's Hugging Face tokenizer.

mlx-lm loads the tokenizer with transformers; for fast tokenizers we talk to the Rust
`tokenizers.Tokenizer` behind it, which is thread-safe, so the server may tokenize on its event
loop while the scheduler thread decodes. A second copy with `encode_special_tokens` switched on
reads text like `<|im_end|>` literally when the caller asks for `parse_special=False`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from launcher.engines.base import REPLY_MARKERS

_PROMPT_CONTEXT_TOKENS = 6  # prompt tokens decoded before the first new token (leading-space rules)


class TokenizerAccess:
    """Encode and decode with one model's tokenizer (any thread)."""

    def __init__(self, hf_tokenizer: Any) -> None:
        self._hf = hf_tokenizer
        backend = getattr(hf_tokenizer, "backend_tokenizer", None)
        self._backend: Any = backend
        self._literal: Any = None
        if backend is not None:
            from tokenizers import Tokenizer

            self._literal = Tokenizer.from_str(backend.to_str())
            self._literal.encode_special_tokens = True
        decoder: dict[int, Any] = dict(getattr(hf_tokenizer, "added_tokens_decoder", {}) or {})
        self.special_ids = frozenset(t for t, tok in decoder.items() if getattr(tok, "special", False))
        self.added_ids = frozenset(decoder)
        self.markers = self._marker_texts()

    def _marker_texts(self) -> dict[int, str]:
        """This tokenizer's special tokens that are reply markers (see REPLY_MARKERS): the ones that
        decoding with `skip_special` would drop although the server's parsers need them."""
        found: dict[int, str] = {}
        for marker in REPLY_MARKERS:
            ids = self.encode(marker, add_special=False, parse_special=True)
            if len(ids) == 1 and not self.decode(ids, skip_special=True):
                found[ids[0]] = marker
        return found

    @property
    def hf(self) -> Any:
        """The transformers tokenizer (for llguidance's bridge)."""
        return self._hf

    def encode(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """Text to token ids; special-token text is parsed only when `parse_special`."""
        if self._backend is not None:
            tokenizer = self._backend if parse_special else self._literal
            return list(tokenizer.encode(text, add_special_tokens=add_special).ids)
        ids = self._hf.encode(text, add_special_tokens=add_special, split_special_tokens=not parse_special)
        return [int(t) for t in ids]

    def decode(self, tokens: Sequence[int], *, skip_special: bool = False) -> str:
        """Token ids to text (special tokens written out unless `skip_special`)."""
        if self._backend is not None:
            return str(self._backend.decode(list(tokens), skip_special_tokens=skip_special))
        return str(self._hf.decode(list(tokens), skip_special_tokens=skip_special))

    def adds_bos(self) -> bool:
        """Whether encoding with special tokens puts a token in front (a BOS the server must not double)."""
        plain = self.encode("a", add_special=False, parse_special=True)
        special = self.encode("a", add_special=True, parse_special=True)
        return len(special) > len(plain) and special[1:][: len(plain)] == plain


class IncrementalText:
    """Text of generated tokens, one piece per token, UTF-8 safe and with the tokenizer's spacing rules.

    Each step decodes a short window (a few already-printed tokens + the new ones) and emits the
    part that is new, holding back pieces that end in an incomplete character. Control tokens
    (special added tokens such as `<|im_start|>`) produce no text, as in the llama.cpp engine,
    except reply markers (gpt-oss channels, `[TOOL_CALLS]`, ...), which are written out.
    """

    def __init__(self, tokens: TokenizerAccess, prompt: Sequence[int]) -> None:
        self._tokens = tokens
        self._ids: list[int] = list(prompt[-_PROMPT_CONTEXT_TOKENS:])
        self._prefix = 0  # window start
        self._read = len(self._ids)  # tokens already turned into emitted text

    def add(self, token: int) -> str:
        """The text this token adds (may be "" while a character is incomplete)."""
        marker = self._tokens.markers.get(token)
        if marker is not None:
            held = self.flush()
            self._ids.append(token)  # decoded windows skip it; it only keeps the count right
            self._read = len(self._ids)
            return held + marker
        self._ids.append(token)
        before = self._tokens.decode(self._ids[self._prefix : self._read], skip_special=True)
        after = self._tokens.decode(self._ids[self._prefix :], skip_special=True)
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return after[len(before) :]

    def flush(self) -> str:
        """Whatever is still held back (an incomplete character comes out as U+FFFD)."""
        if self._read >= len(self._ids):
            return ""
        before = self._tokens.decode(self._ids[self._prefix : self._read], skip_special=True)
        after = self._tokens.decode(self._ids[self._prefix :], skip_special=True)
        self._prefix = self._read = len(self._ids)
        return after[len(before) :] if after.startswith(before) else ""
