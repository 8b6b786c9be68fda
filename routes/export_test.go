package routes

import "reflect"

// ZeroFields returns the zero tag of every field that has one, by its
// README path ("[]" for any list index): what an explicit 0 means there.
func ZeroFields() map[string]string {
	m := map[string]string{}
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			if t.Kind() == reflect.Slice {
				prefix += "[]"
			}
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return
		}
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				p := joinPath(prefix, yamlName(f))
				if why, ok := f.Tag.Lookup("zero"); ok {
					m[p] = why
				}
				walk(f.Type, p)
			}
		}
	}
	walk(reflect.TypeFor[Config](), "")
	return m
}

// DiskNeed is diskNeed, for the test that measures it against real files.
var DiskNeed = diskNeed
