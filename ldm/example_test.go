package ldm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/apbridge/apbridge/ldm"
)

// A LameDuckHandling reads and writes by name in config files.
func ExampleParse() {
	h, err := ldm.Parse("switch-to-passive")
	fmt.Println(h, err)

	var cfg struct {
		LameDuckHandling ldm.LameDuckHandling `json:"lameDuckHandling"`
	}
	err = json.Unmarshal([]byte(`{"lameDuckHandling": "PASSIVE_ONLY"}`), &cfg)
	fmt.Println(cfg.LameDuckHandling, err)

	_, err = ldm.Parse("switch")
	fmt.Println(err)
	// Output:
	// SWITCH_TO_PASSIVE <nil>
	// PASSIVE_ONLY <nil>
	// ldm: unknown lame-duck handling "switch" (valid: NONE, SWITCH_TO_PASSIVE, PASSIVE_ONLY)
}

// A nats.go handler hands work to the Executor and returns at once; a
// request for work already waiting under the same key is folded into it.
func ExampleExecutor() {
	e := ldm.NewExecutor()
	defer e.Close()

	var wg sync.WaitGroup
	wg.Add(1)
	release := make(chan struct{})
	e.Submit("block", func(context.Context) { <-release }) // keeps the worker busy

	// Three lame-duck notices for the same broker while the worker is busy.
	for range 3 {
		queued := e.Submit("switch", func(context.Context) {
			fmt.Println("switching once")
			wg.Done()
		})
		fmt.Println("queued:", queued)
	}
	close(release)
	wg.Wait()
	// Output:
	// queued: true
	// queued: false
	// queued: false
	// switching once
}
