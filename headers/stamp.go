package headers

import (
	"slices"
	"strings"
)

// Header is one record header. Its shape matches kgo.RecordHeader, so the
// generic functions below accept a franz-go record's headers directly.
type Header struct {
	Key   string
	Value []byte
}

// HeaderLike is any header type shaped like Header, such as kgo.RecordHeader.
type HeaderLike interface {
	~struct {
		Key   string
		Value []byte
	}
}

// Dialect selects the header layout a stamp is written in.
type Dialect uint8

const (
	// DialectVC writes the vc, vc-sender and vc-seq headers: the only
	// dialect that can carry sequence entries and a sender tag, and the one
	// the Java library 0.2 reads. Stages write it.
	DialectVC Dialect = iota + 1
	// DialectCauses writes the single parsley.causes header (version 1):
	// offset entries only. Plain producers may choose it.
	DialectCauses
)

// String returns the dialect's header name.
func (d Dialect) String() string {
	switch d {
	case DialectVC:
		return HeaderVC
	case DialectCauses:
		return HeaderCauses
	}
	return "Dialect(" + itoa(int64(d)) + ")"
}

// Stamp is the causal metadata of one record: its dependency clock and, for
// records sent by a stamping node, the sender tag and the record's send
// sequence on its channel.
//
// A Stamp may be reused across records: ReadStamp replaces its contents and
// keeps its storage.
type Stamp struct {
	Clock  Clock
	Tagged bool     // a vc-sender / vc-seq pair was present
	Sender SenderID // meaningful only when Tagged
	Seq    int64    // meaningful only when Tagged

	scratch Clock // decodes the second dialect when a record carries both
}

// Reset empties s, keeping its storage.
func (s *Stamp) Reset() {
	s.Clock.Reset()
	s.Tagged, s.Sender, s.Seq = false, SenderID{}, 0
}

// IsReserved reports whether key is reserved for causal metadata: vc,
// vc-sender, vc-seq, or any name starting with "parsley.".
func IsReserved(key string) bool {
	return key == HeaderVC || key == HeaderVCSender || key == HeaderVCSeq || strings.HasPrefix(key, ReservedPrefix)
}

// CheckReserved returns a *ReservedHeaderError, wrapping ErrReservedHeader,
// for the first header in hs whose name is reserved.
func CheckReserved[H HeaderLike](hs []H) error {
	for _, h := range hs {
		if k := Header(h).Key; IsReserved(k) {
			return &ReservedHeaderError{Key: k}
		}
	}
	return nil
}

// ReadStamp reads the causal metadata of a record's headers into s,
// replacing its contents.
//
// Absent stamp headers read as the empty, untagged stamp. A record carrying
// both dialects reads as the union of their clocks. A stamp header that
// appears twice, a vc-sender without vc-seq or the reverse, or any stamp
// header that fails to decode is an error wrapping ErrUndecodable, and s is
// left empty: present metadata is never read as absent. Headers with other
// names, including other names under the reserved prefix, are ignored.
func ReadStamp[H HeaderLike](s *Stamp, hs []H) error {
	s.Reset()
	if err := readStamp(s, hs); err != nil {
		s.Reset()
		return err
	}
	return nil
}

func readStamp[H HeaderLike](s *Stamp, hs []H) error {
	const (
		vc = iota
		sender
		seq
		causes
	)
	at := [4]int{-1, -1, -1, -1}
	for i, h := range hs {
		k := -1
		switch Header(h).Key {
		case HeaderVC:
			k = vc
		case HeaderVCSender:
			k = sender
		case HeaderVCSeq:
			k = seq
		case HeaderCauses:
			k = causes
		default:
			continue
		}
		if at[k] >= 0 {
			return &DecodeError{Header: Header(h).Key, Offset: 0, Reason: "header appears more than once"}
		}
		at[k] = i
	}
	if (at[sender] >= 0) != (at[seq] >= 0) {
		if at[sender] >= 0 {
			return &DecodeError{Header: HeaderVCSender, Offset: 0, Reason: "present without vc-seq"}
		}
		return &DecodeError{Header: HeaderVCSeq, Offset: 0, Reason: "present without vc-sender"}
	}
	if at[sender] >= 0 {
		id, err := DecodeSender(Header(hs[at[sender]]).Value)
		if err != nil {
			return err
		}
		n, err := DecodeSeq(Header(hs[at[seq]]).Value)
		if err != nil {
			return err
		}
		s.Tagged, s.Sender, s.Seq = true, id, n
	}
	switch {
	case at[vc] >= 0 && at[causes] >= 0:
		if err := DecodeVCInto(&s.Clock, Header(hs[at[vc]]).Value); err != nil {
			return err
		}
		if err := DecodeCausesInto(&s.scratch, Header(hs[at[causes]]).Value); err != nil {
			return err
		}
		s.Clock.Merge(&s.scratch)
	case at[vc] >= 0:
		return DecodeVCInto(&s.Clock, Header(hs[at[vc]]).Value)
	case at[causes] >= 0:
		return DecodeCausesInto(&s.Clock, Header(hs[at[causes]]).Value)
	}
	return nil
}

// AppendStamp appends s's stamp headers to hs, which holds the record's
// application headers, and returns the extended slice.
//
// It refuses, with an error wrapping ErrReservedHeader, application headers
// whose names are reserved. In DialectVC it writes vc and, when s is
// tagged, vc-sender and vc-seq. In DialectCauses it writes parsley.causes and
// refuses, with ErrUnencodable, a tagged stamp or a clock with sequence
// entries. The header values share one new allocation, so hs may be handed
// to a producer that keeps them.
func AppendStamp[H HeaderLike](hs []H, s *Stamp, d Dialect) ([]H, error) {
	hs, _, err := AppendStampTo(hs, nil, s, d)
	return hs, err
}

// AppendStampTo is AppendStamp writing the header values at the end of buf,
// so that many records' stamps can share one allocation. It returns the
// extended headers and buf extended by the values. Like append, it
// reallocates buf when its capacity is short; the bytes before len(buf) are
// neither read nor changed, and every value is capped, so appending to one
// never writes into the next. On an error buf is returned as it was.
func AppendStampTo[H HeaderLike](hs []H, buf []byte, s *Stamp, d Dialect) ([]H, []byte, error) {
	if err := CheckReserved(hs); err != nil {
		return hs, buf, err
	}
	n := len(buf)
	switch d {
	case DialectVC:
		if s.Tagged && s.Seq < 0 {
			return hs, buf, &EncodeError{Dialect: HeaderVC, Reason: "negative send sequence " + itoa(s.Seq)}
		}
		size := VCSize(&s.Clock)
		if s.Tagged {
			size += 16 + 8
		}
		out, err := AppendVC(slices.Grow(buf, size), &s.Clock)
		if err != nil {
			return hs, buf, err
		}
		vc := len(out)
		hs = append(hs, H(Header{Key: HeaderVC, Value: out[n:vc:vc]}))
		if s.Tagged {
			out = AppendSender(out, s.Sender)
			out = AppendSeq(out, s.Seq)
			hs = append(hs,
				H(Header{Key: HeaderVCSender, Value: out[vc : vc+16 : vc+16]}),
				H(Header{Key: HeaderVCSeq, Value: out[vc+16 : vc+24 : vc+24]}))
		}
		return hs, out, nil
	case DialectCauses:
		if s.Tagged {
			return hs, buf, &EncodeError{Dialect: HeaderCauses, Reason: "a sender tag cannot be expressed; use the vc dialect"}
		}
		if err := checkCauses(&s.Clock); err != nil {
			return hs, buf, err
		}
		out := appendCauses(slices.Grow(buf, CausesSize(&s.Clock)), &s.Clock)
		return append(hs, H(Header{Key: HeaderCauses, Value: out[n:len(out):len(out)]})), out, nil
	}
	return hs, buf, &EncodeError{Dialect: d.String(), Reason: "unknown dialect"}
}
