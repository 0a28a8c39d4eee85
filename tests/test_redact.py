"""Credentials never reach run.json, reports or messages: exact names, URL shapes, known values (issues 10, 13)."""

from __future__ import annotations

from kvbench.redact import (
    REDACTED,
    is_secret_name,
    redact_argv,
    redact_params,
    redact_text,
    redact_url,
    secret_values,
)


def test_secret_names_are_exact_not_substrings():
    for name in ("Authorization", "api_key", "x-api-key", "X-API-KEY", "api-key", "token", "password", "Cookie"):
        assert is_secret_name(name), name
    for name in ("token_budget", "max_tokens", "api_key_env", "tokenize_path", "keys", "monkey", "auth_mode"):
        assert not is_secret_name(name), name


def test_url_userinfo_and_key_query_parameters_are_blanked():
    assert redact_url("http://user:KEY123@host:8000/v1") == f"http://{REDACTED}@host:8000/v1"
    assert redact_url("https://h/v1?api_key=abc&model=m") == f"https://h/v1?api_key={REDACTED}&model=m"
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"


def test_settings_keep_their_shape_with_credentials_replaced():
    params = {
        "base_url": "http://u:pw12@h/v1",
        "headers": {"Authorization": "Bearer sk-abc", "X-Trace": "1"},
        "token_budget": 8192,
        "api_key_env": "OPENAI_API_KEY",
    }
    assert redact_params(params) == {
        "base_url": f"http://{REDACTED}@h/v1",
        "headers": {"Authorization": REDACTED, "X-Trace": "1"},
        "token_budget": 8192,
        "api_key_env": "OPENAI_API_KEY",
    }
    assert sorted(secret_values(params)) == ["Bearer sk-abc", "pw12", "sk-abc"]


def test_command_line_and_echoed_errors_are_scrubbed():
    argv = [
        "kvbench",
        "replay",
        "--target",
        "http://u:KEY9@h/v1",
        "--set",
        "headers.Authorization=Bearer sk-x1",
        "--set",
        "token_budget=4096",
    ]
    assert redact_argv(argv) == ["kvbench", "replay", "--target", f"http://{REDACTED}@h/v1", "--set",
                                 f"headers.Authorization={REDACTED}", "--set", "token_budget=4096"]  # fmt: skip
    body = 'HTTP 401: {"error": "invalid key sk-secret-42 for http://u:KEY9@h/v1"}'
    assert (
        redact_text(body, ["sk-secret-42"])
        == f'HTTP 401: {{"error": "invalid key {REDACTED} for http://{REDACTED}@h/v1"}}'
    )
