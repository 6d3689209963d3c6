package templates

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	htemplate "html/template"
	"io"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	ttemplate "text/template"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// embedded holds the built-in templates, one directory per template:
//
//	<name>/settings.yaml       per-template settings (optional)
//	<name>/<locale>/subject.txt  text/template, one line
//	<name>/<locale>/body.txt     text/template, the text part
//	<name>/<locale>/body.html    html/template, the HTML part
//
//go:embed files
var embedded embed.FS

// File names inside a template directory.
const (
	fileSettings = "settings.yaml"
	fileSubject  = "subject.txt"
	fileText     = "body.txt"
	fileHTML     = "body.html"
	// fileNotice is the resend notice, one line of plain text (optional;
	// see Registry.ResendNotice).
	fileNotice = "resend_notice.txt"
)

var (
	nameRE   = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	localeRE = regexp.MustCompile(`^[a-z]{2,3}$`)
)

// layer is one source of template files, named for error messages.
type layer struct {
	fsys fs.FS
	name string
}

// layers are searched in order: a file in an earlier layer (templates.dir)
// hides the file with the same path in a later one (the embedded set).
type layers []layer

// readFile returns the first layer's copy of p, with CRLF turned into LF so
// a template edited on Windows renders the same bytes, and where it was.
func (ls layers) readFile(p string) ([]byte, string, error) {
	for _, l := range ls {
		b, err := fs.ReadFile(l.fsys, p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		where := l.name + ":" + p
		if err != nil {
			return nil, where, fmt.Errorf("read %s: %w", where, err)
		}
		return bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n")), where, nil
	}
	return nil, p, fmt.Errorf("read %s: %w", p, fs.ErrNotExist)
}

// dirs returns the sorted union of the subdirectory names of p in every
// layer, skipping names that start with a dot.
func (ls layers) dirs(p string) ([]string, error) {
	seen := map[string]bool{}
	for _, l := range ls {
		ents, err := fs.ReadDir(l.fsys, p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list %s:%s: %w", l.name, p, err)
		}
		for _, e := range ents {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
				seen[e.Name()] = true
			}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// tmplSet is the parsed templates of one template name and locale.
type tmplSet struct {
	subject *ttemplate.Template
	text    *ttemplate.Template
	html    *htemplate.Template
	// notice is the resend notice, "" when the locale has none.
	notice string
}

// entry is one template: its settings and its locales.
type entry struct {
	settings Settings
	locales  map[string]*tmplSet
}

// load parses every template of ls.
func load(ls layers) (map[string]*entry, error) {
	names, err := ls.dirs(".")
	if err != nil {
		return nil, err
	}
	entries := make(map[string]*entry, len(names))
	for _, name := range names {
		if !nameRE.MatchString(name) {
			return nil, fmt.Errorf("template directory %q: want a name of lowercase letters, digits and '_'", name)
		}
		e, err := loadEntry(ls, name)
		if err != nil {
			return nil, err
		}
		entries[name] = e
	}
	if len(entries) == 0 {
		return nil, errors.New("no templates found")
	}
	return entries, nil
}

// loadEntry parses the settings and every locale of template name.
func loadEntry(ls layers, name string) (*entry, error) {
	settings, err := loadSettings(ls, name)
	if err != nil {
		return nil, err
	}
	locales, err := ls.dirs(name)
	if err != nil {
		return nil, err
	}
	e := &entry{settings: settings, locales: make(map[string]*tmplSet, len(locales))}
	for _, loc := range locales {
		if !localeRE.MatchString(loc) {
			return nil, fmt.Errorf("template %s: locale directory %q: want a lowercase ISO 639 code such as vi or en", name, loc)
		}
		if e.locales[loc], err = loadSet(ls, path.Join(name, loc)); err != nil {
			return nil, err
		}
	}
	if len(e.locales) == 0 {
		return nil, fmt.Errorf("template %s: no locale directories", name)
	}
	return e, nil
}

// loadSet parses the subject, text and HTML templates in dir.
func loadSet(ls layers, dir string) (*tmplSet, error) {
	var s tmplSet
	var err error
	if s.subject, err = parseText(ls, path.Join(dir, fileSubject)); err != nil {
		return nil, err
	}
	if s.text, err = parseText(ls, path.Join(dir, fileText)); err != nil {
		return nil, err
	}
	b, where, err := ls.readFile(path.Join(dir, fileHTML))
	if err != nil {
		return nil, err
	}
	if s.html, err = htemplate.New(where).Option("missingkey=error").Parse(string(b)); err != nil {
		return nil, fmt.Errorf("parse %w", err)
	}
	if s.notice, err = loadNotice(ls, path.Join(dir, fileNotice)); err != nil {
		return nil, err
	}
	return &s, nil
}

// parseText parses the text/template at p.
func parseText(ls layers, p string) (*ttemplate.Template, error) {
	b, where, err := ls.readFile(p)
	if err != nil {
		return nil, err
	}
	t, err := ttemplate.New(where).Option("missingkey=error").Parse(string(b))
	if err != nil {
		return nil, fmt.Errorf("parse %w", err)
	}
	return t, nil
}

// settingsFile is the YAML form of Settings; unknown keys are an error.
type settingsFile struct {
	AmbiguousPolicy string `yaml:"ambiguous_policy"`
	MaxEventAge     string `yaml:"max_event_age"`
	Lane            string `yaml:"lane"`
}

// defaultLane is the lane of a template whose settings do not name one:
// priority for the cancellation notice (it corrects a mail the customer
// already has), bulk for every other template.
func defaultLane(name string) mailtype.Lane {
	if name == mailtype.TemplateCancelNotice {
		return mailtype.LanePriority
	}
	return mailtype.LaneBulk
}

// loadSettings reads name/settings.yaml; a template without one has zero
// Settings (the global config applies).
func loadSettings(ls layers, name string) (Settings, error) {
	b, where, err := ls.readFile(path.Join(name, fileSettings))
	if errors.Is(err, fs.ErrNotExist) {
		return Settings{Lane: defaultLane(name)}, nil
	}
	if err != nil {
		return Settings{}, err
	}
	var f settingsFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return Settings{}, fmt.Errorf("%s: %w", where, err)
	}
	s := Settings{AmbiguousPolicy: mailtype.AmbiguousPolicy(f.AmbiguousPolicy)}
	if s.Lane, err = mailtype.ParseLane(f.Lane, defaultLane(name)); err != nil {
		return Settings{}, fmt.Errorf("%s: lane: %w", where, err)
	}
	if s.AmbiguousPolicy != "" && !s.AmbiguousPolicy.Valid() {
		return Settings{}, fmt.Errorf("%s: ambiguous_policy: want retry, unknown or \"\", got %q", where, f.AmbiguousPolicy)
	}
	if f.MaxEventAge != "" {
		if s.MaxEventAge, err = time.ParseDuration(f.MaxEventAge); err != nil || s.MaxEventAge < 0 {
			return Settings{}, fmt.Errorf("%s: max_event_age: want a non-negative Go duration such as 24h, got %q", where, f.MaxEventAge)
		}
	}
	return s, nil
}
