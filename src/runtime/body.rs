//! One bounded reader of request bodies for the admin (webhooks) and runtime-hooks listeners.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Request;
use hyper::body::Incoming;
use hyper::header::CONTENT_LENGTH;

/// Why a body could not be read.
pub(super) enum BodyError {
    /// Over the limit (declared or sent).
    TooLarge,
    /// Not all of it arrived within the deadline.
    TimedOut,
    /// The connection failed while reading.
    Failed(String),
}

impl BodyError {
    /// What to tell the client (and the log).
    pub(super) fn message(&self, max: usize) -> String {
        match self {
            BodyError::TooLarge => format!("body over {} KiB", max / 1024),
            BodyError::TimedOut => "the body did not arrive in time".into(),
            BodyError::Failed(e) => e.clone(),
        }
    }
}

/// Reads a request body within `deadline`, refusing one over `max` bytes; at most `max` bytes are
/// kept. A body over `max` is still read, and thrown away, up to four times `max` before the
/// refusal: a client still sending it then reads the 413 instead of a connection reset in the
/// middle of its write (a "lingering close", as nginx does). One declared larger than that is
/// refused at once.
pub(super) async fn read(req: Request<Incoming>, max: usize, deadline: Duration) -> Result<Bytes, BodyError> {
    let (max, drain) = (max as u64, 4 * max as u64);
    let declared = req.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > drain) {
        return Err(BodyError::TooLarge);
    }
    let mut body = req.into_body();
    let read = async {
        let (mut kept, mut seen) = (Vec::new(), 0u64);
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| BodyError::Failed(e.to_string()))?;
            if let Ok(data) = frame.into_data() {
                seen += data.len() as u64;
                if seen > drain {
                    return Err(BodyError::TooLarge);
                }
                if seen <= max {
                    kept.extend_from_slice(&data);
                }
            }
        }
        if seen > max { Err(BodyError::TooLarge) } else { Ok(Bytes::from(kept)) }
    };
    tokio::time::timeout(deadline, read).await.unwrap_or(Err(BodyError::TimedOut))
}
