package clock

import (
	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadSender returns the sender tag (vc-sender) and send sequence (vc-seq)
// of a stamped record's headers, for observability: which stage instance
// sent it, and its place in that sender's sends to the channel. ok is
// false when the record carries no tag, as records from plain producers
// do. A tag that is duplicated, half present (one header without the
// other) or malformed is an error wrapping headers.ErrUndecodable. The
// clock headers are not decoded.
func ReadSender[H headers.HeaderLike](hs []H) (sender headers.SenderID, seq int64, ok bool, err error) {
	si, qi := -1, -1
	for i, h := range hs {
		switch headers.Header(h).Key {
		case headers.HeaderVCSender:
			if si >= 0 {
				return headers.SenderID{}, 0, false, &headers.DecodeError{Header: headers.HeaderVCSender, Reason: "header appears more than once"}
			}
			si = i
		case headers.HeaderVCSeq:
			if qi >= 0 {
				return headers.SenderID{}, 0, false, &headers.DecodeError{Header: headers.HeaderVCSeq, Reason: "header appears more than once"}
			}
			qi = i
		}
	}
	switch {
	case si < 0 && qi < 0:
		return headers.SenderID{}, 0, false, nil
	case qi < 0:
		return headers.SenderID{}, 0, false, &headers.DecodeError{Header: headers.HeaderVCSender, Reason: "present without vc-seq"}
	case si < 0:
		return headers.SenderID{}, 0, false, &headers.DecodeError{Header: headers.HeaderVCSeq, Reason: "present without vc-sender"}
	}
	if sender, err = headers.DecodeSender(headers.Header(hs[si]).Value); err != nil {
		return headers.SenderID{}, 0, false, err
	}
	if seq, err = headers.DecodeSeq(headers.Header(hs[qi]).Value); err != nil {
		return headers.SenderID{}, 0, false, err
	}
	return sender, seq, true, nil
}

// RecordSender is ReadSender for a franz-go record.
func RecordSender(rec *kgo.Record) (sender headers.SenderID, seq int64, ok bool, err error) {
	return ReadSender(rec.Headers)
}

// ReadRecordStamp decodes the whole causal metadata of a franz-go record:
// its clock (either dialect, or their union) and its sender tag. Absent
// metadata reads as the empty, untagged stamp; present but undecodable
// metadata is an error wrapping headers.ErrUndecodable.
func ReadRecordStamp(rec *kgo.Record) (*headers.Stamp, error) {
	s := new(headers.Stamp)
	if err := headers.ReadStamp(s, rec.Headers); err != nil {
		return nil, err
	}
	return s, nil
}
