package routes

import (
	"maps"
	"slices"
)

// checkExplicitZeros reports every number or duration written as 0 where 0
// means nothing useful. Every number and duration field carries a zero tag
// that says what an explicit 0 in the file means: empty when 0 is a value
// the field takes as written (or another rule reports it), otherwise why 0
// is meaningless there. Leaving a field out (or writing null) always takes
// its default: a zero is never silently replaced by one. setDefaults has
// replaced a meaningless zero with the default, but the config is invalid:
// what the file says is not what would run. TestZeroFields_ClassifiesEveryNumber
// keeps the tags complete: a new number or duration field needs one.
func (c *Config) checkExplicitZeros(add func(Problem)) {
	for _, p := range slices.Sorted(maps.Keys(c.src.zero)) {
		if why := c.src.zero[p]; why != "" {
			add(c.Errorf(p, "zero-value", "%s: 0 is not a usable value: %s; leave the field out to use its default", p, why))
		}
	}
}
