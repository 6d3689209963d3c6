package config

import (
	"reflect"
	"strings"
	"time"
)

// flatten lists the keys of a configuration value with their values:
// "section.key" by the mapstructure names of c's fields (",squash" fields
// add theirs to their parent's). A value takes the form viper and the
// reference expect: named string types (URL, Secret) as string, a nil
// list of strings as an empty one, a list of entries (console.users) as
// an empty []any.
func flatten(c Config) map[string]any {
	out := map[string]any{}
	flattenInto(out, "", reflect.ValueOf(c))
	return out
}

func flattenInto(out map[string]any, prefix string, v reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		fv := v.Field(i)
		if opts == "squash" {
			flattenInto(out, prefix, fv)
			continue
		}
		if fv.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Duration]() {
			flattenInto(out, prefix+name+".", fv)
			continue
		}
		out[prefix+name] = plain(fv)
	}
}

// plain is v as flatten gives it.
func plain(v reflect.Value) any {
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.String {
			return []any{}
		}
		s := make([]string, v.Len())
		for i := range s {
			s[i] = v.Index(i).String()
		}
		return s
	}
	return v.Interface()
}
