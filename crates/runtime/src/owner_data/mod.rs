//! Two operations every channel exposes on everything the service keeps
//! for one owner:
//!
//! * **export** ([`Service::export`]): threads with their transcripts,
//!   memory (facts, session summaries, style preferences), moods, exercise
//!   history and session feedback, as JSON with a versioned schema
//!   ([`EXPORT_SCHEMA`], [`ExportDocument`]) or as readable Markdown;
//! * **forget me** ([`Service::forget_me_prepare`] →
//!   [`Service::forget_me_confirm`]): deletes all of it, with a confirmation
//!   token in between; the crisis log keeps its anonymous rows with the
//!   owner's id cleared.
//!
//! Both speak their own request and result types (no store or memory type
//! crosses them) and fail with [`OwnerDataError`], whose [`code`] is stable
//! for channels to map (HTTP status, words in a terminal).
//!
//! Which data is the owner's: memory records, feedback and crisis-log rows
//! by the owner id; threads by `opencouch_store::thread_belongs_to` (scoped
//! `OWNER:…`, or naming the owner as their user, or a thread-scoped thread
//! whose id is the owner); API users by name.
//!
//! [`Service::export`]: crate::Service::export
//! [`Service::forget_me_prepare`]: crate::Service::forget_me_prepare
//! [`Service::forget_me_confirm`]: crate::Service::forget_me_confirm
//! [`code`]: OwnerDataError::code

mod export;
mod forget;
mod markdown;

pub use export::{
    EXPORT_SCHEMA, ExportDocument, ExportExerciseCount, ExportExerciseEntry, ExportExercises,
    ExportFact, ExportFeedback, ExportFile, ExportFormat, ExportMemory, ExportMessage, ExportMood,
    ExportOpenSession, ExportOtherRecord, ExportPreferences, ExportRequest, ExportRule,
    ExportSession, ExportThread,
};
pub use forget::{
    FORGET_ME_TOKEN_TTL, ForgetMeConfirm, ForgetMeCounts, ForgetMeDone, ForgetMePlan,
    ForgetMeRequest,
};

use crate::error::ErrorCode;
use crate::service::api::Service;
use crate::service::error::ServiceError;
use crate::thread_id::owner_problem;

/// Why an export or a forget-me step failed. [`Self::code`] is stable.
#[derive(Debug, thiserror::Error)]
pub enum OwnerDataError {
    /// The owner id is empty, too long or holds control characters.
    #[error("invalid owner id: {0}")]
    InvalidOwner(&'static str),
    /// The confirmation token was not given to this owner by prepare.
    #[error("unknown confirmation token: ask to forget again to get a new one")]
    UnknownToken,
    /// The token expired, or what is stored changed since it was given.
    #[error("the confirmation is out of date ({0}): ask to forget again")]
    StaleToken(&'static str),
    /// Storage failed; a forget-me that failed midway may have deleted
    /// part (running it again finishes).
    #[error("storage is unavailable")]
    Storage(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The export could not be encoded.
    #[error("the export could not be encoded")]
    Encode,
}

impl OwnerDataError {
    /// The stable machine code of the failure.
    pub fn code(&self) -> &'static str {
        match self {
            OwnerDataError::InvalidOwner(_) => "invalid_owner",
            OwnerDataError::UnknownToken => "forget_token_unknown",
            OwnerDataError::StaleToken(_) => "forget_token_stale",
            OwnerDataError::Storage(_) => "storage_unavailable",
            OwnerDataError::Encode => "internal",
        }
    }
}

impl From<opencouch_store::StoreError> for OwnerDataError {
    fn from(e: opencouch_store::StoreError) -> Self {
        OwnerDataError::Storage(Box::new(e))
    }
}

/// The one rule for an owner id ([`owner_problem`]).
pub(crate) fn check_owner(owner: &str) -> Result<(), OwnerDataError> {
    match owner_problem(owner) {
        Some(why) => Err(OwnerDataError::InvalidOwner(why)),
        None => Ok(()),
    }
}

/// Rendering sits here, above both the document (`export`) and its Markdown
/// form (`markdown`), so neither module imports the other's caller.
impl Service {
    /// Everything kept for the request's owner, rendered in its format
    /// with a media type and a file name.
    ///
    /// # Errors
    /// As [`crate::Service::export_document`].
    pub async fn export(&self, req: &ExportRequest) -> Result<ExportFile, ServiceError> {
        let doc = self.export_document(&req.owner).await?;
        let body = match req.format {
            ExportFormat::Json => {
                let mut text =
                    serde_json::to_string_pretty(&doc).map_err(|_| OwnerDataError::Encode)?;
                text.push('\n');
                text
            }
            ExportFormat::Markdown => markdown::render(&doc),
        };
        tracing::info!(
            threads = doc.threads.len(),
            format = req.format.extension(),
            "export made"
        );
        Ok(ExportFile {
            format: req.format,
            media_type: req.format.media_type(),
            filename: export::filename(&req.owner, doc.exported_at, req.format),
            body,
        })
    }
}

impl From<OwnerDataError> for ServiceError {
    fn from(e: OwnerDataError) -> Self {
        let code = match e {
            OwnerDataError::InvalidOwner(_) => ErrorCode::InvalidOwner,
            OwnerDataError::UnknownToken => ErrorCode::ForgetTokenUnknown,
            OwnerDataError::StaleToken(_) => ErrorCode::ForgetTokenStale,
            OwnerDataError::Storage(_) => {
                return ServiceError::caused(
                    ErrorCode::StorageUnavailable,
                    "storage is unavailable",
                    e,
                );
            }
            OwnerDataError::Encode => {
                return ServiceError::caused(
                    ErrorCode::Internal,
                    "the export could not be encoded",
                    e,
                );
            }
        };
        ServiceError::new(code, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_ids_are_checked() {
        assert!(check_owner("alice").is_ok());
        assert!(check_owner("cli:default").is_ok());
        for bad in [
            "",
            "a\nb",
            &"x".repeat(crate::thread_id::MAX_STORED_THREAD_ID_CHARS + 1),
        ] {
            assert_eq!(check_owner(bad).map_err(|e| e.code()), Err("invalid_owner"));
        }
    }
}
