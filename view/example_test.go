package view_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/view"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
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

// A token for one record, known by topic name, partition and offset: a
// read with it waits until the task that owns the key delivered the record.
// The resolver is the writer's clock's (clk.Resolver()), or one made over
// an admin client. (Not run: it needs a cluster.)
func ExampleTokenFor() {
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers("localhost:9092"))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	res := clock.NewResolver(kadm.NewClient(cl), 0)
	tok, err := view.TokenFor(ctx, res, "orders", 3, 41)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(tok) // pt1.… — for a Parsley-Token header
}
