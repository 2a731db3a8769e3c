//! A reader of server-sent events from a streaming HTTP body: the `/store/watch` stream, and
//! any other event stream a client of a CCattler server follows.

use ccattler_core::StoreError;
use http_body_util::BodyExt;
use hyper::body::Incoming;

/// One server-sent event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field (`message` when absent).
    pub event: String,
    /// The `id:` field; empty when absent.
    pub id: String,
    /// The `data:` lines, joined by newlines.
    pub data: String,
}

/// Splits a body into events as its bytes arrive.
#[derive(Debug)]
pub struct EventReader {
    body: Incoming,
    buffer: Vec<u8>,
}

impl EventReader {
    /// Reads events from `body`.
    pub fn new(body: Incoming) -> Self {
        EventReader {
            body,
            buffer: Vec::new(),
        }
    }

    /// The next event; `None` when the stream ended. Comments (keep-alives) are skipped.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when the connection fails.
    pub async fn next(&mut self) -> Result<Option<SseEvent>, StoreError> {
        loop {
            if let Some((text_end, block_end)) = find_blank_line(&self.buffer) {
                let block: Vec<u8> = self.buffer.drain(..block_end).collect();
                if let Some(event) = parse_block(&String::from_utf8_lossy(&block[..text_end])) {
                    return Ok(Some(event));
                }
                continue;
            }
            match self.body.frame().await {
                None => return Ok(None),
                Some(Err(err)) => {
                    return Err(StoreError::unavailable(format!(
                        "the event stream failed: {err}"
                    )));
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
            }
        }
    }
}

/// The end of the first event block: (end of its text, end of the separator).
fn find_blank_line(buffer: &[u8]) -> Option<(usize, usize)> {
    let lf = buffer
        .windows(2)
        .position(|w| w == b"\n\n")
        .map(|i| (i, i + 2));
    let crlf = buffer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, i + 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// Parses one block; `None` for a block of comments only.
pub fn parse_block(block: &str) -> Option<SseEvent> {
    let mut event = SseEvent::default();
    let mut data: Vec<&str> = Vec::new();
    let mut any = false;
    for line in block.lines() {
        if line.starts_with(':') || line.is_empty() {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        any = true;
        match field {
            "event" => event.event = value.to_owned(),
            "id" => event.id = value.to_owned(),
            "data" => data.push(value),
            _ => {}
        }
    }
    if !any {
        return None;
    }
    if event.event.is_empty() {
        event.event = "message".to_owned();
    }
    event.data = data.join("\n");
    Some(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_parse_into_events() {
        let event = parse_block("event: change\nid: 7\ndata: {\"a\":1}").expect("event");
        assert_eq!(event.event, "change");
        assert_eq!(event.id, "7");
        assert_eq!(event.data, "{\"a\":1}");
        assert_eq!(parse_block(":keep-alive"), None);
        assert_eq!(find_blank_line(b"data: x\n\nrest"), Some((7, 9)));
        assert_eq!(find_blank_line(b"data: x\r\n\r\n"), Some((7, 11)));
    }
}
