//! The OpenAI request bodies the server accepts, checked field by field, and the error
//! objects it answers with.
//!
//! Only the fields the simulation uses are read (and type-checked); others are accepted and
//! ignored, as OpenAI-compatible servers do. Generated text is filler, so sampling settings
//! change nothing.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use crate::tokens::{render_chat, ChatTurn, Tokenizer};

/// An OpenAI-shaped error response.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<&'static str>,
    pub code: Option<&'static str>,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>, param: Option<&'static str>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param,
            code: None,
        }
    }

    pub fn body(&self) -> Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = axum::Json(self.body()).into_response();
        *response.status_mut() = self.status;
        response
    }
}

/// Which endpoint a body came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    Chat,
}

/// A checked request, its prompt tokenized.
#[derive(Debug)]
pub struct Generation {
    pub prompt_tokens: Vec<u32>,
    /// Output tokens to generate.
    pub output_tokens: usize,
    /// The request set the output length (then it ends by length).
    pub length_given: bool,
    pub stream: bool,
    pub include_usage: bool,
}

fn field<'a>(body: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    body.get(name).filter(|value| !value.is_null())
}

fn boolean(body: &Map<String, Value>, name: &'static str) -> Result<bool, ApiError> {
    match field(body, name) {
        None => Ok(false),
        Some(Value::Bool(value)) => Ok(*value),
        Some(_) => Err(ApiError::bad_request(
            format!("'{name}' must be a boolean"),
            Some(name),
        )),
    }
}

fn count(body: &Map<String, Value>, name: &'static str) -> Result<Option<u64>, ApiError> {
    match field(body, name) {
        None => Ok(None),
        Some(value) => value.as_u64().map(Some).ok_or_else(|| {
            ApiError::bad_request(
                format!("'{name}' must be a non-negative integer, got {value}"),
                Some(name),
            )
        }),
    }
}

/// Checks `body` (already JSON) for `endpoint` against the served `model`; tokenizes its
/// prompt. `default_output_tokens` is the output length when the request sets none.
pub fn parse(
    body: &Value,
    endpoint: Endpoint,
    model: &str,
    tokenizer: &Tokenizer,
    default_output_tokens: usize,
) -> Result<Generation, ApiError> {
    let Some(body) = body.as_object() else {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
            None,
        ));
    };
    match field(body, "model") {
        None => {
            return Err(ApiError::bad_request(
                "'model' is a required property",
                Some("model"),
            ))
        }
        Some(Value::String(name)) if name == model => {}
        Some(Value::String(name)) => {
            return Err(ApiError {
                status: StatusCode::NOT_FOUND,
                message: format!("The model `{name}` does not exist."),
                kind: "invalid_request_error",
                param: Some("model"),
                code: Some("model_not_found"),
            })
        }
        Some(_) => {
            return Err(ApiError::bad_request(
                "'model' must be a string",
                Some("model"),
            ))
        }
    }
    if let Some(n) = field(body, "n") {
        if n.as_u64() != Some(1) {
            return Err(ApiError::bad_request(
                format!("only n=1 is supported, got {n}"),
                Some("n"),
            ));
        }
    }
    let stream = boolean(body, "stream")?;
    let include_usage = match field(body, "stream_options") {
        None => false,
        Some(Value::Object(options)) => {
            if !stream {
                return Err(ApiError::bad_request(
                    "'stream_options' is only allowed when 'stream' is true",
                    Some("stream_options"),
                ));
            }
            boolean(options, "include_usage").map_err(|_| {
                ApiError::bad_request(
                    "'stream_options.include_usage' must be a boolean",
                    Some("stream_options"),
                )
            })?
        }
        Some(_) => {
            return Err(ApiError::bad_request(
                "'stream_options' must be an object",
                Some("stream_options"),
            ))
        }
    };
    // Filler text has no end-of-sequence token: generation always runs to its length.
    boolean(body, "ignore_eos")?;
    let max_tokens = match endpoint {
        Endpoint::Chat => match count(body, "max_completion_tokens")? {
            Some(tokens) => Some((tokens, "max_completion_tokens")),
            None => count(body, "max_tokens")?.map(|tokens| (tokens, "max_tokens")),
        },
        Endpoint::Completions => count(body, "max_tokens")?.map(|tokens| (tokens, "max_tokens")),
    };
    if let Some((0, name)) = max_tokens {
        return Err(ApiError::bad_request(
            format!("'{name}' must be at least 1"),
            Some(if name == "max_tokens" {
                "max_tokens"
            } else {
                "max_completion_tokens"
            }),
        ));
    }
    let output_tokens = max_tokens.map_or(default_output_tokens as u64, |(tokens, _)| tokens);
    if let Some(min_tokens) = count(body, "min_tokens")? {
        if min_tokens > output_tokens {
            return Err(ApiError::bad_request(
                format!(
                    "'min_tokens' ({min_tokens}) must not exceed the maximum output length \
                     ({output_tokens})"
                ),
                Some("min_tokens"),
            ));
        }
    }
    let prompt_tokens = match endpoint {
        Endpoint::Completions => completion_prompt(body, tokenizer)?,
        Endpoint::Chat => chat_prompt(body, tokenizer)?,
    };
    if prompt_tokens.is_empty() {
        return Err(ApiError::bad_request(
            "the prompt is empty",
            Some(match endpoint {
                Endpoint::Completions => "prompt",
                Endpoint::Chat => "messages",
            }),
        ));
    }
    Ok(Generation {
        prompt_tokens,
        output_tokens: usize::try_from(output_tokens).unwrap_or(usize::MAX),
        length_given: max_tokens.is_some(),
        stream,
        include_usage,
    })
}

/// A completion's prompt: a string, token ids, or a list of one of either.
fn completion_prompt(
    body: &Map<String, Value>,
    tokenizer: &Tokenizer,
) -> Result<Vec<u32>, ApiError> {
    let invalid = || {
        ApiError::bad_request(
            "'prompt' must be a string, an array of token ids, or an array holding one of \
             either",
            Some("prompt"),
        )
    };
    let prompt = field(body, "prompt")
        .ok_or_else(|| ApiError::bad_request("'prompt' is a required property", Some("prompt")))?;
    match prompt {
        Value::String(text) => Ok(tokenizer.encode(text)),
        Value::Array(items) if items.iter().all(Value::is_number) => {
            token_ids(items).ok_or_else(invalid)
        }
        Value::Array(items) if items.len() == 1 => match &items[0] {
            Value::String(text) => Ok(tokenizer.encode(text)),
            Value::Array(ids) => token_ids(ids).ok_or_else(invalid),
            _ => Err(invalid()),
        },
        Value::Array(items) if items.len() > 1 => Err(ApiError::bad_request(
            "only one prompt per request is supported",
            Some("prompt"),
        )),
        _ => Err(invalid()),
    }
}

fn token_ids(items: &[Value]) -> Option<Vec<u32>> {
    items
        .iter()
        .map(|item| item.as_u64().and_then(|id| u32::try_from(id).ok()))
        .collect()
}

/// A chat's prompt: its messages through the fixed template.
fn chat_prompt(body: &Map<String, Value>, tokenizer: &Tokenizer) -> Result<Vec<u32>, ApiError> {
    let param = Some("messages");
    let messages = match field(body, "messages") {
        None => {
            return Err(ApiError::bad_request(
                "'messages' is a required property",
                param,
            ))
        }
        Some(Value::Array(messages)) if !messages.is_empty() => messages,
        Some(_) => {
            return Err(ApiError::bad_request(
                "'messages' must be a non-empty array of messages",
                param,
            ))
        }
    };
    let mut contents = Vec::with_capacity(messages.len());
    for (index, message) in messages.iter().enumerate() {
        let Some(message) = message.as_object() else {
            return Err(ApiError::bad_request(
                format!("messages[{index}] must be an object"),
                param,
            ));
        };
        let Some(role) = field(message, "role").and_then(Value::as_str) else {
            return Err(ApiError::bad_request(
                format!("messages[{index}].role must be a string"),
                param,
            ));
        };
        let content = match field(message, "content") {
            None => String::new(),
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for part in parts {
                    match part.get("text").and_then(Value::as_str) {
                        Some(piece) if part.get("type").and_then(Value::as_str) == Some("text") => {
                            text.push_str(piece)
                        }
                        _ => {
                            return Err(ApiError::bad_request(
                                format!(
                                    "messages[{index}].content: only text parts \
                                     ({{\"type\": \"text\", \"text\": ...}}) are supported"
                                ),
                                param,
                            ))
                        }
                    }
                }
                text
            }
            Some(_) => {
                return Err(ApiError::bad_request(
                    format!("messages[{index}].content must be a string or an array of parts"),
                    param,
                ))
            }
        };
        contents.push((role.to_string(), content));
    }
    let turns: Vec<ChatTurn<'_>> = contents
        .iter()
        .map(|(role, content)| ChatTurn { role, content })
        .collect();
    Ok(tokenizer.encode(&render_chat(&turns)))
}
