package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The doc comments in config.go state each default ("Default 60s."); this
// holds them to Default() so readers of either are told the truth.
func TestDocCommentsMatchDefault(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "config.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{} // "Server.Port" -> doc text
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		if st, ok := ts.Type.(*ast.StructType); ok {
			for _, fld := range st.Fields.List {
				for _, name := range fld.Names {
					docs[ts.Name.Name+"."+name.Name] = fld.Doc.Text()
				}
			}
		}
		return false
	})

	checked := 0
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		for i := range v.NumField() {
			fld, fv := v.Type().Field(i), v.Field(i)
			if fld.Type.Kind() == reflect.Struct && fld.Type != durationType {
				walk(fv)
				continue
			}
			doc := docs[v.Type().Name()+"."+fld.Name]
			_, rest, ok := strings.Cut(doc, "Default ")
			if !ok {
				continue
			}
			stated := firstValue(rest)
			if !docMatches(stated, fv) {
				t.Errorf("%s.%s: doc says Default %s, Default() has %v", v.Type().Name(), fld.Name, stated, fv)
			}
			checked++
		}
	}
	walk(reflect.ValueOf(Default()))
	if checked < len(leafKeys)-1 {
		t.Errorf("checked %d documented defaults, want about %d: did the comment style change?", checked, len(leafKeys))
	}
}

// firstValue takes the value after "Default ": a quoted string or one word
// without its closing period.
func firstValue(s string) string {
	if strings.HasPrefix(s, `"`) {
		if end := strings.Index(s[1:], `"`); end >= 0 {
			return s[:end+2]
		}
	}
	word, _, _ := strings.Cut(s, " ")
	word, _, _ = strings.Cut(word, "\n")
	return strings.TrimSuffix(word, ".")
}

func docMatches(stated string, v reflect.Value) bool {
	if v.Type() == durationType {
		d, err := time.ParseDuration(stated)
		return err == nil && d == time.Duration(v.Int())
	}
	switch v.Kind() {
	case reflect.String:
		return stated == strconv.Quote(v.String())
	case reflect.Bool:
		return stated == strconv.FormatBool(v.Bool())
	case reflect.Int:
		return stated == strconv.FormatInt(v.Int(), 10)
	case reflect.Uint32:
		return stated == strconv.FormatUint(v.Uint(), 10)
	case reflect.Float64:
		f, err := strconv.ParseFloat(stated, 64)
		return err == nil && f == v.Float()
	case reflect.Pointer:
		return stated == "nil" && v.IsNil()
	case reflect.Slice:
		return stated == "nil" && v.IsNil() || stated == "[]" && !v.IsNil() && v.Len() == 0
	case reflect.Map:
		return stated == "{}" && !v.IsNil() && v.Len() == 0
	}
	return false
}
