package fleet

import (
	"hash/fnv"
	"slices"
	"strings"
)

// Rank orders relays for pair by rendezvous (highest random weight)
// hashing: each (pair, relay) gets a pseudo-random weight and the heaviest
// relay comes first. A relay that joins or leaves changes the first place
// of only the pairs it wins or held, about 1/N of them. Every member
// computes the same order from the same set.
func Rank(pair string, relays []string) []string {
	out := slices.Clone(relays)
	w := make(map[string]uint64, len(out))
	for _, r := range out {
		w[r] = weight(pair, r)
	}
	slices.SortFunc(out, func(a, b string) int {
		switch {
		case w[a] > w[b]:
			return -1
		case w[a] < w[b]:
			return 1
		}
		return strings.Compare(a, b)
	})
	return out
}

func weight(pair, relay string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(pair))
	h.Write([]byte{0})
	h.Write([]byte(relay))
	// FNV alone clusters on similar names (relay-1, relay-2): a final
	// mix (splitmix64's) spreads them.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
