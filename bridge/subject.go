package bridge

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// SubjectFunc maps a record to the NATS subject it is published on. It
// must be deterministic: a step processed again after an abort publishes
// every record where the first attempt did, and JetStream deduplicates by
// message ID within one stream only. An error fails the step (and stops
// the bridge) with the record's coordinate.
type SubjectFunc func(topic string, partition int32, key []byte) (string, error)

// Template returns a SubjectFunc that fills a template with the record's
// topic, partition and key, e.g. "kafka.{topic}.{partition}" or
// "orders.{key}". The key becomes one subject token: as it is when it
// consists of ASCII letters, digits, '-' and '_'; "~~" when it is nil;
// otherwise "~" followed by its unpadded URL-safe base64. The token
// grammar keeps distinct keys on distinct subjects.
func Template(tmpl string) (SubjectFunc, error) {
	type part struct {
		lit string
		ph  string // "topic", "partition", "key" or "" for a literal
	}
	var parts []part
	rest := tmpl
	for rest != "" {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			parts = append(parts, part{lit: rest})
			break
		}
		if i > 0 {
			parts = append(parts, part{lit: rest[:i]})
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return nil, fmt.Errorf("%w: template %q: unclosed {", ErrInvalidConfig, tmpl)
		}
		name := rest[i+1 : i+j]
		switch name {
		case "topic", "partition", "key":
		default:
			return nil, fmt.Errorf("%w: template %q: unknown placeholder {%s} (have {topic}, {partition}, {key})", ErrInvalidConfig, tmpl, name)
		}
		parts = append(parts, part{ph: name})
		rest = rest[i+j+1:]
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: empty subject template", ErrInvalidConfig)
	}
	return func(topic string, partition int32, key []byte) (string, error) {
		var b strings.Builder
		for _, p := range parts {
			switch p.ph {
			case "":
				b.WriteString(p.lit)
			case "topic":
				b.WriteString(topic)
			case "partition":
				b.WriteString(strconv.FormatInt(int64(partition), 10))
			case "key":
				b.WriteString(KeyToken(key))
			}
		}
		return b.String(), nil
	}, nil
}

// KeyToken returns the subject token Template uses for a record key.
func KeyToken(key []byte) string {
	if key == nil {
		return "~~"
	}
	plain := len(key) > 0
	for _, c := range key {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			plain = false
			break
		}
	}
	if plain {
		return string(key)
	}
	return "~" + base64.RawURLEncoding.EncodeToString(key)
}

// checkSubject reports why s cannot be published to, or nil: a publish
// subject has non-empty dot-separated tokens, no wildcards and no
// whitespace or control characters.
func checkSubject(s string) error {
	if s == "" {
		return fmt.Errorf("empty subject")
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" {
			return fmt.Errorf("subject %q has an empty token", s)
		}
		if tok == "*" || tok == ">" {
			return fmt.Errorf("subject %q has a wildcard", s)
		}
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c == 0x7f {
			return fmt.Errorf("subject %q has whitespace or a control character", s)
		}
	}
	return nil
}

// subjectMatches reports whether subject matches a stream's subject
// filter, with NATS wildcards: '*' matches one token, a final '>' one or
// more.
func subjectMatches(filter, subject string) bool {
	for {
		ft, frest, fmore := strings.Cut(filter, ".")
		st, srest, smore := strings.Cut(subject, ".")
		switch {
		case ft == ">" && !fmore:
			return true
		case ft != "*" && ft != st:
			return false
		}
		if !fmore || !smore {
			return fmore == smore
		}
		filter, subject = frest, srest
	}
}
