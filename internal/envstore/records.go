package envstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// maxRecordBytes caps a record read back (records are ours; this guards
// against a damaged file, not an attacker).
const maxRecordBytes = 4 << 20

func (s *Store) recordPath(name string) string {
	return s.path(envsDir, name+".json")
}

// Get returns the environment named name (ErrNotFound: none).
func (s *Store) Get(name string) (Env, error) {
	if err := checkName(name); err != nil {
		return Env{}, err
	}
	return s.readRecord(s.recordPath(name))
}

func (s *Store) readRecord(path string) (Env, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Env{}, ErrNotFound
	}
	if err != nil {
		return Env{}, fmt.Errorf("envstore: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRecordBytes+1))
	if err != nil {
		return Env{}, fmt.Errorf("envstore: %w", err)
	}
	if len(b) > maxRecordBytes {
		return Env{}, fmt.Errorf("envstore: record %s is over %d bytes", filepath.Base(path), maxRecordBytes)
	}
	var e Env
	if err := json.Unmarshal(b, &e); err != nil {
		return Env{}, fmt.Errorf("envstore: record %s: %w", filepath.Base(path), err)
	}
	return e, nil
}

// List returns every environment, by name.
func (s *Store) List() ([]Env, error) {
	ents, err := os.ReadDir(s.path(envsDir))
	if err != nil {
		return nil, fmt.Errorf("envstore: %w", err)
	}
	var out []Env
	for _, de := range ents {
		name, ok := strings.CutSuffix(de.Name(), ".json")
		if !ok || !de.Type().IsRegular() || checkName(name) != nil {
			continue // a temporary file of a write in progress
		}
		e, err := s.readRecord(filepath.Join(s.path(envsDir), de.Name()))
		if errors.Is(err, ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Remove deletes the record of name; GC frees what no record uses.
func (s *Store) Remove(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	err = os.Remove(s.recordPath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("envstore: %w", err)
	}
	return syncDir(s.path(envsDir))
}

// createRecord writes e as a new record: to a temporary file, synced,
// then hard-linked to its name, which fails when the name exists (so two
// builds of one name cannot both land, even across processes).
func (s *Store) createRecord(e Env) error {
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return fmt.Errorf("envstore: %w", err)
	}
	dir := s.path(envsDir)
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("envstore: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("envstore: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("envstore: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("envstore: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("envstore: %w", err)
	}
	if err := os.Link(tmp.Name(), s.recordPath(e.Name)); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return ErrExists
		}
		return fmt.Errorf("envstore: %w", err)
	}
	return syncDir(dir)
}

// syncDir makes a rename or link in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("envstore: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("envstore: %w", err)
	}
	return nil
}
