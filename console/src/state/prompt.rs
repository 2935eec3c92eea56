//! A one-line text input (the `/` filter, the `:` command line, a typed limit, a typed count):
//! plain data, edited by the app from keys, drawn by the view.

/// Longest input taken, in characters (a filter or a number needs far less).
pub const MAX_INPUT_CHARS: usize = 200;

/// The text and the cursor (a character index).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineInput {
    chars: Vec<char>,
    cursor: usize,
}

/// An edit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edit {
    Insert(char),
    Backspace,
    Delete,
    Left,
    Right,
    Home,
    End,
    /// Delete the word before the cursor (ctrl-w).
    DeleteWord,
    /// Delete everything before the cursor (ctrl-u).
    DeleteToStart,
}

impl LineInput {
    pub fn new(text: &str) -> Self {
        let chars: Vec<char> = text.chars().take(MAX_INPUT_CHARS).collect();
        let cursor = chars.len();
        Self { chars, cursor }
    }

    pub fn text(&self) -> String {
        self.chars.iter().collect()
    }

    pub fn cursor(&self) -> usize {
        self.cursor
    }

    pub fn is_empty(&self) -> bool {
        self.chars.is_empty()
    }

    pub fn edit(&mut self, edit: Edit) {
        match edit {
            Edit::Insert(c) => {
                // Control characters never enter the text (a paste of escapes stays inert).
                if !c.is_control() && self.chars.len() < MAX_INPUT_CHARS {
                    self.chars.insert(self.cursor, c);
                    self.cursor += 1;
                }
            }
            Edit::Backspace => {
                if self.cursor > 0 {
                    self.cursor -= 1;
                    self.chars.remove(self.cursor);
                }
            }
            Edit::Delete => {
                if self.cursor < self.chars.len() {
                    self.chars.remove(self.cursor);
                }
            }
            Edit::Left => self.cursor = self.cursor.saturating_sub(1),
            Edit::Right => self.cursor = (self.cursor + 1).min(self.chars.len()),
            Edit::Home => self.cursor = 0,
            Edit::End => self.cursor = self.chars.len(),
            Edit::DeleteWord => {
                let mut start = self.cursor;
                while start > 0 && self.chars[start - 1] == ' ' {
                    start -= 1;
                }
                while start > 0 && self.chars[start - 1] != ' ' {
                    start -= 1;
                }
                self.chars.drain(start..self.cursor);
                self.cursor = start;
            }
            Edit::DeleteToStart => {
                self.chars.drain(..self.cursor);
                self.cursor = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_happen_at_the_cursor() {
        let mut i = LineInput::new("type:mail");
        i.edit(Edit::Home);
        i.edit(Edit::Insert('x'));
        i.edit(Edit::End);
        i.edit(Edit::Backspace);
        assert_eq!(i.text(), "xtype:mai");
        i.edit(Edit::Insert(' '));
        i.edit(Edit::Insert('b'));
        i.edit(Edit::DeleteWord);
        assert_eq!(i.text(), "xtype:mai ");
        i.edit(Edit::DeleteToStart);
        assert!(i.is_empty());
    }

    #[test]
    fn control_characters_never_enter() {
        let mut i = LineInput::default();
        for c in "a\u{1b}[2Jb\n".chars() {
            i.edit(Edit::Insert(c));
        }
        assert_eq!(i.text(), "a[2Jb");
    }
}
