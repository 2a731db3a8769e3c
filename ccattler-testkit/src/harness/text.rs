//! The plain-text form of a harness's facts: one fact per line.

use ccattler_core::{Key, StoreLimits, Value};

use super::error::FactError;

/// Parses `text` into facts, in order. The grammar is in [`Harness::facts`](super::Harness::facts).
pub(crate) fn parse(text: &str) -> Result<Vec<(Key, Value)>, FactError> {
    let mut facts = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let error = |message: String| FactError::Line {
            line: index + 1,
            text: line.to_owned(),
            message,
        };
        let (key, value) = split(line).map_err(error)?;
        let key = Key::new(key).map_err(|e| error(e.to_string()))?;
        let limit = StoreLimits::default().max_value_bytes;
        if value.len() > limit {
            return Err(error(format!(
                "the value of {} bytes is over the store's limit of {limit} bytes",
                value.len()
            )));
        }
        facts.push((key, Value::from(value.to_owned())));
    }
    Ok(facts)
}

/// `put KEY VALUE` or `KEY = VALUE`: the key and the value, both non-empty.
fn split(line: &str) -> Result<(&str, &str), String> {
    let (key, value) = if let Some(rest) = line
        .strip_prefix("put")
        .filter(|rest| rest.starts_with(char::is_whitespace))
    {
        let rest = rest.trim_start();
        rest.split_once(char::is_whitespace)
            .map_or((rest, ""), |(key, value)| (key, value.trim()))
    } else if let Some((key, value)) = line.split_once('=') {
        (key.trim(), value.trim())
    } else {
        return Err("expected `put KEY VALUE` or `KEY = VALUE`".to_owned());
    };
    if key.is_empty() {
        return Err("no key; expected `put KEY VALUE` or `KEY = VALUE`".to_owned());
    }
    if key.contains(char::is_whitespace) {
        return Err(format!(
            "the key `{key}` holds a space; keys in this form have none (use Harness::fact)"
        ));
    }
    if value.is_empty() {
        return Err(format!(
            "no value for {key}; expected `put KEY VALUE` or `KEY = VALUE` (an empty value \
             only with Harness::fact)"
        ));
    }
    Ok((key, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Vec<(String, String)> {
        parse(text)
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k.to_string(), String::from_utf8(v.to_vec()).unwrap()))
            .collect()
    }

    #[test]
    fn both_forms_comments_and_blank_lines() {
        let text = "
            # endpoints of web
            put endpoint/service/web {\"endpoints\": [{\"address\": \"n1:80\", \"instance\": \"web-1\", \"node\": \"n1\"}]}
            config/dns/domain = prod.example.com
            a=b=c
        ";
        let pairs = |list: &[(&str, &str)]| {
            list.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            parsed(text),
            pairs(&[
                (
                    "endpoint/service/web",
                    "{\"endpoints\": [{\"address\": \"n1:80\", \"instance\": \"web-1\", \"node\": \"n1\"}]}"
                ),
                ("config/dns/domain", "prod.example.com"),
                ("a", "b=c"),
            ])
        );
    }

    #[test]
    fn errors_name_the_line_and_say_what_is_expected() {
        let cases = [
            (
                "ok = 1\nnonsense",
                2,
                "expected `put KEY VALUE` or `KEY = VALUE`",
            ),
            ("put a/b", 1, "no value for a/b"),
            ("a/b =  ", 1, "no value for a/b"),
            (" = 1", 1, "no key"),
            ("a b = 1", 1, "holds a space"),
            ("\n\nput /a 1", 3, "starts with `/`"),
            ("x//y = 1", 1, "empty path segment"),
        ];
        for (text, line, wanted) in cases {
            let err = parse(text).unwrap_err();
            assert!(
                matches!(&err, FactError::Line { line: l, .. } if *l == line),
                "{text:?}: {err}"
            );
            let message = err.to_string();
            assert!(
                message.starts_with(&format!("facts text, line {line} `"))
                    && message.contains(wanted),
                "{text:?}: {message}"
            );
        }
    }
}
