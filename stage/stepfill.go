package stage

// How long a step's further polls wait (fillStep, session.go).
//
// The client keeps one fetch response buffered per broker and sends the next
// fetch only once a poll has taken it. While a step runs, the records that
// reach the broker after the buffered response stay there: no fetch is in
// flight. When the step ends, the loop's poll takes the buffered response at
// once, and that poll sends the fetch for what piled up meanwhile. A further
// poll that waits only stepPollWait misses its answer (a round trip, one to
// a few milliseconds on a loaded machine): the step commits without those
// records, and they wait out the next step as well. Under a steady flow a
// record then waited about two steps besides its own (bench/streamspeer's
// timelines at 5,000 records/s: a mean of 2.06 steps ended between a
// record's send and its delivery; 1.3-1.55 with the wait below).
//
// So when the loop's poll returned records without waiting (they were
// buffered: the input is flowing faster than steps end), the step's first
// further poll waits up to stepFetchWait for the fetch that poll sent. It
// ends as soon as records arrive, so it costs its full length only when
// the broker had nothing: at most stepFetchWait per step, and only for
// steps that found a backlog. A loop that waited in its poll (light or
// sparse input, where a fetch is in flight while the loop idles) keeps
// stepPollWait.

import "time"

// stepFetchWait bounds the wait of a step's first further poll for the
// fetch the loop's poll sent, when that poll found records buffered.
const stepFetchWait = 5 * time.Millisecond

// bufferedPoll is how fast a poll that found records already buffered
// returns: a poll that had to wait for a fetch takes at least a round trip
// to the broker, and in practice the loop's wait for the next record.
const bufferedPoll = 500 * time.Microsecond

// fillWait returns how long a step's further poll waits: polls is how many
// polls the step has taken, backlog whether the loop's poll found its
// records buffered, left the time until the step's commit interval ends.
func fillWait(backlog bool, polls int, left time.Duration) time.Duration {
	w := stepPollWait
	if backlog && polls == 1 {
		w = stepFetchWait
	}
	return max(min(w, left), 0)
}
