//! Paged listings (ListTasks, ListAudit): the page a request asks for and the cut of a page
//! that would not fit one message. Newest first; a page continues below the id of its last
//! row (`before_id`), 0 meaning from the newest.
//!
//! Invariants: a validated page has `1 ..= MAX_PAGE` rows and no negative cursor; a cut page
//! keeps at least one row, so a listing always makes progress even when one row is huge.

use tonic::Status;

/// Default page size of a listing.
pub const DEFAULT_PAGE: u32 = 100;
/// Largest page of a listing.
pub const MAX_PAGE: u32 = 1_000;
/// Most bytes of rows in one listing answer: a page of big rows is cut short (with a cursor)
/// to stay below the message limit.
pub const MAX_PAGE_BYTES: usize = leasehold_proto::MAX_MESSAGE_BYTES - 64 * 1024;

/// The page a listing request asks for, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// Rows below this id; `None` is from the newest.
    pub before_id: Option<i64>,
    /// Rows at most: [`DEFAULT_PAGE`] when the request said 0.
    pub limit: u32,
}

/// The page of a request's `before_id` and `limit`: INVALID_ARGUMENT naming the field for a
/// negative cursor or a limit above [`MAX_PAGE`].
pub fn page_from_wire(before_id: i64, limit: u32) -> Result<Page, Status> {
    if before_id < 0 {
        return Err(Status::invalid_argument(format!(
            "before_id: {before_id} is negative"
        )));
    }
    let limit = match limit {
        0 => DEFAULT_PAGE,
        n if n > MAX_PAGE => {
            return Err(Status::invalid_argument(format!(
                "limit: {n} is above {MAX_PAGE}"
            )));
        }
        n => n,
    };
    Ok(Page {
        before_id: (before_id > 0).then_some(before_id),
        limit,
    })
}

/// Cuts `rows` (newest first) to fit [`MAX_PAGE_BYTES`], keeping at least one; returns the
/// cursor to continue from (the `id` of the last row kept) when it cut.
pub fn fit_page<T: prost::Message>(rows: &mut Vec<T>, id: impl Fn(&T) -> i64) -> Option<i64> {
    let mut bytes = 0usize;
    let cut = rows.iter().position(|r| {
        // The row's tag and length prefix take at most 6 bytes.
        bytes += r.encoded_len() + 6;
        bytes > MAX_PAGE_BYTES
    })?;
    let keep = cut.max(1);
    if keep >= rows.len() {
        return None;
    }
    rows.truncate(keep);
    rows.last().map(id)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use leasehold_proto::v1 as pb;

    #[test]
    fn a_page_is_validated_and_defaulted() {
        assert_eq!(
            page_from_wire(0, 0).unwrap(),
            Page {
                before_id: None,
                limit: DEFAULT_PAGE
            }
        );
        assert_eq!(
            page_from_wire(7, MAX_PAGE).unwrap(),
            Page {
                before_id: Some(7),
                limit: MAX_PAGE
            }
        );
        let negative = page_from_wire(-1, 5).unwrap_err();
        assert_eq!(negative.code(), tonic::Code::InvalidArgument);
        assert!(negative.message().starts_with("before_id:"));
        let above = page_from_wire(0, MAX_PAGE + 1).unwrap_err();
        assert_eq!(above.code(), tonic::Code::InvalidArgument);
        assert!(above.message().starts_with("limit:"));
    }

    #[test]
    fn a_page_of_big_rows_is_cut_to_fit_a_message_with_a_cursor() {
        let task = |id: i64, bytes: usize| pb::Task {
            id,
            payload_json: "p".repeat(bytes),
            ..Default::default()
        };
        let id = |t: &pb::Task| t.id;
        let mut small: Vec<pb::Task> = (1..=5).rev().map(|id| task(id, 100)).collect();
        assert_eq!(fit_page(&mut small, id), None);
        assert_eq!(small.len(), 5);
        let mut big: Vec<pb::Task> = (1..=6).rev().map(|id| task(id, 1_000_000)).collect();
        assert_eq!(
            fit_page(&mut big, id),
            Some(3),
            "4 MiB holds 4 tasks of 1 MB: 6, 5, 4, 3"
        );
        assert_eq!(big.len(), 4);
        let mut huge = vec![task(2, 5_000_000), task(1, 10)];
        assert_eq!(
            fit_page(&mut huge, id),
            Some(2),
            "at least one row per page"
        );
    }
}
