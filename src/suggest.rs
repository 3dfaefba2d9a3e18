//! "Did you mean …?": the closest known word to a misspelled one, so a typo in a command, flag or
//! tool name gets the fix in the error message instead of a list to read through.

/// Levenshtein distance between two short words (in characters).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Whether a distance is small enough to be a typo of a word of `len` characters: at most 2, or a
/// third of the word for long ones (so `xyzzy` suggests nothing).
pub fn close_enough(distance: usize, len: usize) -> bool {
    distance <= 2.max(len / 3) && distance < len.max(1)
}

/// The candidate closest to `word` (case-insensitive), when it is close enough to be a typo.
pub fn closest<'a, I>(word: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let lower = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| (edit_distance(&lower, &c.to_ascii_lowercase()), c))
        .min_by_key(|(d, _)| *d)
        .filter(|(d, _)| close_enough(*d, lower.chars().count()))
        .map(|(_, c)| c)
}

/// ` (did you mean "x"?)` for the closest candidate, or nothing: for names written as JSON
/// strings (tool names, plan and policy keys), where `"x"` is what to paste.
pub fn did_you_mean<'a, I>(word: &str, candidates: I) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    did_you_mean_as(word, candidates, |c| format!("{c:?}"))
}

/// ` (did you mean X?)` with X the closest candidate as `show` writes it, or nothing. Why: the
/// suggestion is the text that works when pasted (`--json` for a flag, `validate` for a command),
/// not the candidate's bare name.
pub fn did_you_mean_as<'a, I>(word: &str, candidates: I, show: impl Fn(&str) -> String) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    closest(word, candidates)
        .map(|c| format!(" (did you mean {}?)", show(c)))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_get_the_nearest_word_and_nonsense_gets_none() {
        assert_eq!(edit_distance("veryfy", "verify"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(
            closest("file_raed", ["file_read", "file_write"]),
            Some("file_read")
        );
        assert_eq!(closest("confrim", ["confirm", "config"]), Some("confirm"));
        assert_eq!(closest("xyzzyplugh", ["run", "show"]), None);
        assert_eq!(
            did_you_mean("jsno", ["json", "jsonl"]),
            " (did you mean \"json\"?)"
        );
        assert_eq!(did_you_mean("zz", ["json"]), "");
    }
}
