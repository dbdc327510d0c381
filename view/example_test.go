package view_test

import (
	"errors"
	"fmt"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/view"
)

// A token travels as text, in a header or a cookie, and parses strictly.
func ExampleParseToken() {
	c := new(headers.Clock)
	c.SetOffset(headers.Channel{Topic: headers.TopicID{0x10, 15: 1}, Partition: 3}, 41)
	tok := view.TokenOf(c)
	text := tok.String()
	back, err := view.ParseToken(text)
	fmt.Println(err, back.String() == text)

	_, err = view.ParseToken(text + "=")
	fmt.Println(errors.Is(err, view.ErrBadToken))
	// Output:
	// <nil> true
	// true
}
