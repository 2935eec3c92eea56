//! Selection, scrolling, sort and filter of one table view.
//!
//! Invariant: the selection is a row *key* (a task id, a type name, an agent id), never a row
//! number, so rows arriving, leaving or re-sorting under the cursor never move it to another
//! task. When the selected row leaves, the selection passes to the row now at its position —
//! the one that followed it — so a step down from a row that just left lands on that row
//! rather than skipping it.

/// The rows of a table as the selection sees them: how many, where a key is, the key at a
/// position. Lease views answer from their cached order without making a string per row.
pub trait RowKeys {
    fn count(&self) -> usize;
    fn find(&self, key: &str) -> Option<usize>;
    fn key_at(&self, index: usize) -> Option<String>;
}

impl<S: AsRef<str>> RowKeys for [S] {
    fn count(&self) -> usize {
        self.len()
    }
    fn find(&self, key: &str) -> Option<usize> {
        self.iter().position(|k| k.as_ref() == key)
    }
    fn key_at(&self, index: usize) -> Option<String> {
        self.get(index).map(|k| k.as_ref().to_string())
    }
}

/// The table part of one view.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    /// Key of the selected row.
    pub selected: Option<String>,
    /// Where the selected row was at the last sync (for when it leaves).
    pub index: usize,
    /// First row shown.
    pub offset: usize,
    /// Index into the view's sort keys.
    pub sort: usize,
    /// Reverse the sort key's natural order.
    pub reverse: bool,
    /// The filter typed after `/` (applied to this view only).
    pub filter: String,
}

impl Table {
    /// Re-finds the selection among `keys` (in display order) and keeps it visible in a page
    /// of `page` rows; the selected index.
    pub fn sync<K: RowKeys + ?Sized>(&mut self, keys: &K, page: usize) -> Option<usize> {
        if keys.count() == 0 {
            self.offset = 0;
            self.index = 0;
            return None;
        }
        let found = self.selected.as_deref().and_then(|k| keys.find(k));
        let index = found.unwrap_or_else(|| self.index.min(keys.count() - 1));
        self.select_index(keys, index, page);
        Some(index)
    }

    /// Moves the selection by `delta` rows (clamped to the table).
    pub fn move_by<K: RowKeys + ?Sized>(&mut self, keys: &K, delta: isize, page: usize) {
        let left = self
            .selected
            .as_deref()
            .is_some_and(|k| keys.find(k).is_none());
        let Some(current) = self.sync(keys, page) else {
            return;
        };
        // The selected row left since the last sync: the row now at its place is the one
        // that followed it, one step down already.
        let delta = if left && delta > 0 { delta - 1 } else { delta };
        let last = keys.count() - 1;
        let target = if delta < 0 {
            current.saturating_sub(delta.unsigned_abs())
        } else {
            current.saturating_add(delta.unsigned_abs()).min(last)
        };
        self.select_index(keys, target, page);
    }

    /// Selects the first (`false`) or last (`true`) row.
    pub fn jump<K: RowKeys + ?Sized>(&mut self, keys: &K, to_end: bool, page: usize) {
        if keys.count() == 0 {
            return;
        }
        let index = if to_end { keys.count() - 1 } else { 0 };
        self.select_index(keys, index, page);
    }

    fn select_index<K: RowKeys + ?Sized>(&mut self, keys: &K, index: usize, page: usize) {
        self.index = index;
        self.selected = keys.key_at(index);
        let page = page.max(1);
        if index < self.offset {
            self.offset = index;
        } else if index >= self.offset + page {
            self.offset = index + 1 - page;
        }
        // Never leave blank rows below the table when it could show more.
        let max_offset = keys.count().saturating_sub(page);
        self.offset = self.offset.min(max_offset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selection_follows_its_key_when_rows_move() {
        let mut t = Table::default();
        t.sync(&["3", "1", "2"][..], 10);
        t.move_by(&["3", "1", "2"][..], 1, 10);
        assert_eq!(t.selected.as_deref(), Some("1"));
        // A row arrives above it: still "1", now at index 2.
        assert_eq!(t.sync(&["9", "3", "1", "2"][..], 10), Some(2));
        assert_eq!(t.selected.as_deref(), Some("1"));
    }

    #[test]
    fn when_the_selected_row_leaves_its_neighbour_takes_its_place() {
        let mut t = Table::default();
        t.jump(&["a", "b", "c"][..], true, 10);
        t.move_by(&["a", "b", "c"][..], -1, 10);
        assert_eq!(t.selected.as_deref(), Some("b"));
        assert_eq!(t.sync(&["a", "c"][..], 10), Some(1));
        assert_eq!(t.selected.as_deref(), Some("c"));
        assert_eq!(t.sync(&["a"][..], 10), Some(0));
        assert_eq!(t.selected.as_deref(), Some("a"));
        assert_eq!(t.sync::<[&str]>(&[][..], 10), None);
    }

    #[test]
    fn a_step_down_from_a_row_that_just_left_lands_on_the_row_after_it() {
        let mut t = Table::default();
        t.sync(&["a", "b", "c", "d"][..], 10);
        t.move_by(&["a", "b", "c", "d"][..], 1, 10);
        assert_eq!(t.selected.as_deref(), Some("b"));
        // "b" finishes before the next sync; `j` means "the row after b": c, not d.
        t.move_by(&["a", "c", "d"][..], 1, 10);
        assert_eq!(t.selected.as_deref(), Some("c"));
        // Up from a row that left goes to the row before it.
        t.move_by(&["a", "d"][..], -1, 10);
        assert_eq!(t.selected.as_deref(), Some("a"));
    }

    #[test]
    fn scrolling_keeps_the_selection_in_the_page() {
        let keys: Vec<String> = (0..100).map(|i| i.to_string()).collect();
        let mut t = Table::default();
        t.move_by(&keys[..], 30, 10);
        assert_eq!((t.index, t.offset), (30, 21));
        t.move_by(&keys[..], -5, 10);
        assert_eq!((t.index, t.offset), (25, 21));
        t.move_by(&keys[..], -25, 10);
        assert_eq!((t.index, t.offset), (0, 0));
        t.move_by(&keys[..], 1000, 10);
        assert_eq!((t.index, t.offset), (99, 90));
    }
}
