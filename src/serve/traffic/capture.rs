//! The answers of a response, read as it passes: a JSON body whole, an event stream chunk by
//! chunk (the concatenated `delta.content` of each choice). Bounded: at most [`MAX_ANSWERS`]
//! choices and [`MAX_TEXT`] bytes of text per request are kept (the record then says
//! `truncated`), and an event line longer than [`MAX_LINE`] is skipped, so a response cannot
//! make the log hold more than that.

use serde_json::Value;

/// Most choices recorded per request.
pub const MAX_ANSWERS: usize = 128;
/// Most answer text recorded per request, in bytes.
pub const MAX_TEXT: usize = 1 << 20;
/// Longest server-sent event line read.
pub const MAX_LINE: usize = 4 << 20;

/// The answers seen so far.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Answers {
    pub texts: Vec<String>,
    /// Per choice; empty until the choice finishes.
    pub finish_reasons: Vec<String>,
    pub truncated: bool,
    /// The stream said it is complete (`[DONE]`, or a Responses API final event): the answers
    /// are whole, even before the stream itself ends.
    pub ended: bool,
    /// Text bytes kept, over all choices.
    kept: usize,
    /// An unfinished event-stream line.
    line: Vec<u8>,
    /// The current line is over [`MAX_LINE`] and is being skipped.
    skipping: bool,
}

impl Answers {
    fn slot(&mut self, index: usize) -> Option<usize> {
        if index >= MAX_ANSWERS {
            self.truncated = true;
            return None;
        }
        if index >= self.texts.len() {
            self.texts.resize(index + 1, String::new());
            self.finish_reasons.resize(index + 1, String::new());
        }
        Some(index)
    }

    fn push_text(&mut self, index: usize, text: &str) {
        let Some(index) = self.slot(index) else {
            return;
        };
        let room = MAX_TEXT - self.kept;
        let piece = if text.len() <= room {
            text
        } else {
            self.truncated = true;
            &text[..text.floor_char_boundary(room)]
        };
        self.kept += piece.len();
        self.texts[index].push_str(piece);
    }

    fn finish(&mut self, index: usize, reason: &str) {
        if let Some(index) = self.slot(index) {
            self.finish_reasons[index] = reason.to_owned();
        }
    }

    /// How many answers there are.
    pub fn count(&self) -> usize {
        self.texts.len()
    }

    /// Reads a whole JSON response body: chat choices' `message.content`, completions'
    /// `text`, or a Responses API `output`.
    pub fn from_json(body: &[u8]) -> Self {
        let mut answers = Self::default();
        let Ok(body) = serde_json::from_slice::<Value>(body) else {
            return answers;
        };
        if let Some(choices) = body["choices"].as_array() {
            for (position, choice) in choices.iter().enumerate() {
                let index = index_of(choice, position);
                let text = choice["message"]["content"]
                    .as_str()
                    .or_else(|| choice["text"].as_str())
                    .unwrap_or_default();
                answers.push_text(index, text);
                answers.finish(index, choice["finish_reason"].as_str().unwrap_or_default());
            }
        } else if body["object"] == "response" {
            answers.push_text(0, &output_text(&body));
            answers.finish(0, &response_finish(&body));
        } else if body["type"] == "message" {
            // Anthropic's Messages API.
            let text: String = body["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|block| block["text"].as_str())
                .collect();
            answers.push_text(0, &text);
            answers.finish(0, message_finish(&body["stop_reason"]));
        }
        answers
    }

    /// Reads the next bytes of an event stream.
    pub fn feed_stream(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            if byte == b'\n' {
                if !std::mem::take(&mut self.skipping) {
                    let line = std::mem::take(&mut self.line);
                    self.event_line(&line);
                } else {
                    self.line.clear();
                }
            } else if !self.skipping {
                if self.line.len() >= MAX_LINE {
                    self.skipping = true;
                    self.truncated = true;
                    self.line = Vec::new();
                } else {
                    self.line.push(byte);
                }
            }
        }
    }

    fn event_line(&mut self, line: &[u8]) {
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        let data = data.strip_prefix(b" ").unwrap_or(data);
        let data = data.strip_suffix(b"\r").unwrap_or(data);
        if data == b"[DONE]" {
            self.ended = true;
            return;
        }
        let Ok(event) = serde_json::from_slice::<Value>(data) else {
            return; // `[DONE]`, or not JSON
        };
        if let Some(choices) = event["choices"].as_array() {
            for (position, choice) in choices.iter().enumerate() {
                let index = index_of(choice, position);
                let text = choice["delta"]["content"]
                    .as_str()
                    .or_else(|| choice["text"].as_str());
                match text {
                    Some(text) => self.push_text(index, text),
                    // A choice's first chunk may carry only its role.
                    None => {
                        let _ = self.slot(index);
                    }
                }
                if let Some(reason) = choice["finish_reason"].as_str() {
                    self.finish(index, reason);
                }
            }
        } else if event.get("error").is_some() {
            for index in 0..self.texts.len().max(1) {
                if self.slot(index).is_some() && self.finish_reasons[index].is_empty() {
                    self.finish_reasons[index] = "error".into();
                }
            }
        } else {
            // The Responses API's events.
            match event["type"].as_str() {
                Some("response.output_text.delta") => {
                    self.push_text(0, event["delta"].as_str().unwrap_or_default());
                }
                Some("response.completed" | "response.incomplete" | "response.failed") => {
                    let reason = response_finish(&event["response"]);
                    self.finish(0, &reason);
                    self.ended = true;
                }
                // Anthropic's Messages API events.
                Some("message_start") => {
                    let _ = self.slot(0);
                }
                Some("content_block_delta") => {
                    if let Some(text) = event["delta"]["text"].as_str() {
                        self.push_text(0, text);
                    }
                }
                Some("message_delta") => {
                    self.finish(0, message_finish(&event["delta"]["stop_reason"]));
                }
                Some("message_stop") => self.ended = true,
                _ => {}
            }
        }
    }

    /// The finish reasons, with `incomplete` for a choice whose stream ended before its
    /// finish (the client went away, or the server stopped).
    pub fn finish_reasons(&self) -> Vec<String> {
        self.finish_reasons
            .iter()
            .map(|reason| {
                if reason.is_empty() {
                    "incomplete".to_owned()
                } else {
                    reason.clone()
                }
            })
            .collect()
    }
}

fn index_of(choice: &Value, position: usize) -> usize {
    choice["index"]
        .as_u64()
        .map_or(position, |i| usize::try_from(i).unwrap_or(usize::MAX))
}

/// The text of a Responses API response: its `output_text` parts, in order.
fn output_text(response: &Value) -> String {
    let mut text = String::new();
    for item in response["output"].as_array().into_iter().flatten() {
        for part in item["content"].as_array().into_iter().flatten() {
            if part["type"] == "output_text" {
                text.push_str(part["text"].as_str().unwrap_or_default());
            }
        }
    }
    text
}

/// An Anthropic `stop_reason` as a chat finish reason.
fn message_finish(stop_reason: &Value) -> &'static str {
    match stop_reason.as_str() {
        Some("end_turn" | "stop_sequence") => "stop",
        Some("max_tokens") => "length",
        Some("tool_use") => "tool_calls",
        Some(_) => "content_filter",
        None => "",
    }
}

/// A Responses API status as a chat finish reason.
fn response_finish(response: &Value) -> String {
    match response["status"].as_str() {
        Some("completed") => "stop".into(),
        Some("incomplete") => match response["incomplete_details"]["reason"].as_str() {
            Some("max_output_tokens") => "length".into(),
            Some(other) => other.into(),
            None => "incomplete".into(),
        },
        Some("failed") => "error".into(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn sse(events: &[Value]) -> String {
        let mut text: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        text.push_str("data: [DONE]\n\n");
        text
    }

    #[test]
    fn json_bodies_of_each_route_give_their_answers() {
        let chat = json!({"object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "one"}, "finish_reason": "stop"},
            {"index": 1, "message": {"role": "assistant", "content": null}, "finish_reason": "tool_calls"}]});
        let answers = Answers::from_json(chat.to_string().as_bytes());
        assert_eq!(answers.texts, ["one", ""]);
        assert_eq!(answers.finish_reasons(), ["stop", "tool_calls"]);
        let completion = json!({"object": "text_completion", "choices": [
            {"index": 0, "text": " 4", "finish_reason": "length"}]});
        let answers = Answers::from_json(completion.to_string().as_bytes());
        assert_eq!(
            (answers.texts, answers.finish_reasons),
            (vec![" 4".to_owned()], vec!["length".to_owned()])
        );
        let response = json!({"object": "response", "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "hel"}, {"type": "output_text", "text": "lo"}]}]});
        let answers = Answers::from_json(response.to_string().as_bytes());
        assert_eq!(answers.texts, ["hello"]);
        assert_eq!(answers.finish_reasons, ["length"]);
        assert_eq!(Answers::from_json(b"{\"error\": {}}").count(), 0);
    }

    #[test]
    fn streams_are_joined_per_choice_across_any_chunking() {
        let chunk = |index: usize, delta: Value, finish: Value| {
            json!({"object": "chat.completion.chunk", "choices": [
                {"index": index, "delta": delta, "finish_reason": finish}]})
        };
        let stream = sse(&[
            chunk(0, json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(1, json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(0, json!({"content": "Hel"}), Value::Null),
            chunk(1, json!({"content": "Bon"}), Value::Null),
            chunk(0, json!({"content": "lo ✓"}), Value::Null),
            chunk(0, json!({}), json!("stop")),
            chunk(1, json!({"content": "jour"}), Value::Null),
            chunk(1, json!({}), json!("length")),
        ]);
        // Byte by byte: a chunk boundary may fall anywhere, inside a character too.
        let mut answers = Answers::default();
        for byte in stream.as_bytes() {
            answers.feed_stream(std::slice::from_ref(byte));
        }
        assert_eq!(answers.texts, ["Hello ✓", "Bonjour"]);
        assert_eq!(answers.finish_reasons(), ["stop", "length"]);
        assert!(!answers.truncated);
        assert!(answers.ended, "[DONE] was seen");

        // Completions' chunks carry `text`; the Responses API sends typed events.
        let mut completions = Answers::default();
        completions.feed_stream(
            sse(&[
                json!({"choices": [{"index": 0, "text": "4", "finish_reason": null}]}),
                json!({"choices": [{"index": 0, "text": "2", "finish_reason": "stop"}]}),
            ])
            .as_bytes(),
        );
        assert_eq!(completions.texts, ["42"]);
        let mut responses = Answers::default();
        responses.feed_stream(
            b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n\
              event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\"}}\n\n",
        );
        assert_eq!(
            (responses.texts.clone(), responses.finish_reasons()),
            (vec!["Hi".to_owned()], vec!["stop".to_owned()])
        );
    }

    #[test]
    fn a_stream_cut_short_or_failing_says_so() {
        let mut answers = Answers::default();
        answers.feed_stream(
            b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hal\"},\"finish_reason\":null}]}\n\n",
        );
        assert_eq!(answers.finish_reasons(), ["incomplete"]);
        assert!(!answers.ended);
        answers.feed_stream(b"data: {\"error\":{\"message\":\"upstream failed\"}}\n\n");
        assert_eq!(
            (answers.texts.clone(), answers.finish_reasons()),
            (vec!["Hal".to_owned()], vec!["error".to_owned()])
        );
    }

    #[test]
    fn what_is_kept_is_bounded() {
        let mut answers = Answers::default();
        let big = "é".repeat(MAX_TEXT); // two bytes each
        let event = json!({"choices": [{"index": 0, "delta": {"content": big}}]});
        answers.feed_stream(format!("data: {event}\n").as_bytes());
        assert!(answers.truncated);
        assert!(answers.texts[0].len() <= MAX_TEXT && answers.texts[0].len() > MAX_TEXT - 2);
        let far = json!({"choices": [{"index": MAX_ANSWERS, "delta": {"content": "x"}}]});
        let mut answers = Answers::default();
        answers.feed_stream(format!("data: {far}\n").as_bytes());
        assert_eq!((answers.count(), answers.truncated), (0, true));
        // A line without end is dropped once it is over the bound, and what follows is read.
        let mut answers = Answers::default();
        answers.feed_stream(&vec![b'x'; MAX_LINE + 10]);
        assert!(answers.line.is_empty());
        answers
            .feed_stream(b"\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n");
        assert_eq!(answers.texts, ["ok"]);
    }
}
