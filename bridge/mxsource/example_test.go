package mxsource_test

import (
	"fmt"
	"time"

	"github.com/apbridge/apbridge/bridge/mxsource"
)

// A source on a pair of gateways, supervisory (write user 0), with a hot
// standby. Add it to a bridge with its tags (bridge.AddSource), or to a
// relay built in code with relay.WithSource.
func ExampleNew() {
	src, err := mxsource.New("galaxy", mxsource.Config{
		Endpoints:      []string{"gw-a.plant:5001", "gw-b.plant:5001"},
		Mode:           mxsource.ModeHot,
		CommandTimeout: 90 * time.Second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer src.Close()
	fmt.Println(src.Name(), src.Health().State)
	// Output: galaxy connecting
}

// Bad settings are refused up front, each error naming its field and the
// allowed range.
func ExampleConfig_Validate() {
	err := mxsource.Config{
		Endpoints:            []string{"gw-a.plant:5001", "gw-a.plant:5001"},
		SubscribeParallelism: 500,
	}.Validate()
	fmt.Println(err)
	// Output:
	// endpoints[1]: "gw-a.plant:5001" is listed twice (a pair needs two gateways)
	// subscribeParallelism: 500 is out of range (valid 1-128)
}
