package main

import (
	"fmt"
	"slices"
	"strings"
)

// The profile's block of the verdict (issue 37): the runtime's recommended
// profile, rt-profile (GODEBUG=rtProfile on the patched toolchain),
// against the same toolchain with no setting (rt-none) and against package
// net on stock Go, in every cell that has it. Its target is that it loses
// nowhere.

// wideInterval is how far a paired interval may reach from its geometric
// mean, either way, before the cell needs more rounds to be judged.
const wideInterval = 0.10

// profileTarget is the profile's target and the rule a target on a ratio
// is judged by, as issue 37 states them.
const profileTarget = "Target: the profile loses in no cell, against rt-none or against net. A target on a ratio is met when the " +
	"geometric mean meets it and the paired interval does not lie wholly on the worse side of 1.0."

// profileBlock is a row per cell with the profile's row: its figure on
// the cell's measure and its paired ratio to rt-none and to net, then
// where it wins, is level, loses or is unresolved against each, whether
// the target is met, where rt-none itself loses to net (to be understood
// before the profile is judged there), and the cells whose interval is
// too wide to judge. nil when no cell has the profile's row.
func profileBlock(vs []cellVerdict) *block {
	b := &block{id: "profile", title: fmt.Sprintf("The runtime's profile (%s) against rt-none and against package net", profileCfg),
		notes: []string{fmt.Sprintf("%s is package net's server on the patched toolchain under GODEBUG=%s; rt-none the same without a setting; "+
			"net the same on stock Go. Ratios are %s's figure over the other's on the cell's measure.", profileCfg, rtProfile, profileCfg)},
		head: []string{"cell", "measure", "figure", "vs rt-none", "vs net"}, left: 2, indent: "  "}
	vsNone, vsNet, noneVsNet := wordCount{}, wordCount{}, wordCount{}
	var wide []string
	for _, v := range vs {
		x := v.row(profileCfg)
		if x == nil || x.missing {
			continue
		}
		m, cell := v.measure, v.cp.short()
		net := v.row("net")
		if net != nil && net.missing {
			net = nil
		}
		none, noNet := "no rt-none", "no net"
		if x.vsNone != nil {
			none = compact(x.vsNone, m)
			vsNone.add(x.vsNone, m, cell)
		}
		if net != nil && x.vsNet != nil {
			noNet = compact(x.vsNet, m)
			vsNet.add(x.vsNet, m, cell)
			if r := v.row("rt-none"); r != nil && r.vsNet != nil && !r.missing {
				noneVsNet.add(r.vsNet, m, cell)
			}
		}
		b.rows = append(b.rows, []string{cell, m.name, fmtUnit(m.unit, x.med[m.unit]), none, noNet})
		var w []string
		for _, c := range []struct {
			name string
			c    *comparison
		}{{"rt-none", x.vsNone}, {"net", x.vsNet}} {
			if c.c != nil && c.c.wide() {
				w = append(w, "vs "+c.name+" "+c.c.interval())
			}
		}
		if len(w) > 0 {
			wide = append(wide, fmt.Sprintf("%s (%s; %s)", cell, strings.Join(w, ", "), moreRounds(v.cp)))
		}
	}
	if len(b.rows) == 0 {
		return nil
	}
	for _, x := range []struct {
		who   string
		count wordCount
	}{{"rt-none", vsNone}, {"package net", vsNet}} {
		if words := x.count.String(); words != "" {
			b.notes = append(b.notes, "Against "+x.who+", the profile "+words+".")
		}
	}
	var lost []string // the cells where it loses against either, once each
	for _, c := range append(slices.Clone(vsNone[verdictLoses]), vsNet[verdictLoses]...) {
		if !slices.Contains(lost, c) {
			lost = append(lost, c)
		}
	}
	switch {
	case len(vsNone)+len(vsNet) == 0:
		b.notes = append(b.notes, "Target not judged: no cell has rt-none or net beside the profile.")
	case len(lost) == 0:
		b.notes = append(b.notes, "Target met: the profile loses in no cell.")
	default:
		b.notes = append(b.notes, fmt.Sprintf("TARGET NOT MET: the profile loses in %d (%s).", len(lost), strings.Join(lost, "; ")))
	}
	if cs := noneVsNet[verdictLoses]; len(cs) > 0 {
		b.notes = append(b.notes, fmt.Sprintf("rt-none itself loses to net in %d (%s): find out why before judging the profile there.",
			len(cs), strings.Join(cs, "; ")))
	}
	if len(wide) > 0 {
		b.notes = append(b.notes, fmt.Sprintf("Needs more rounds before it is judged (an interval wider than ±%.0f%%): %s.",
			100*wideInterval, strings.Join(wide, "; ")))
	}
	b.foot = []string{profileTarget, ratioRule}
	return b
}

// wide reports whether c's paired interval reaches further than
// wideInterval from its geometric mean, either way. A one-sample ratio
// has no interval, and is never wide.
func (c comparison) wide() bool {
	if c.n < 2 || c.oneSample {
		return false
	}
	return c.hi > c.geo*(1+wideInterval) || c.lo < c.geo*(1-wideInterval)
}

// moreRounds says how to rerun cp with more rounds: the flags of its
// rounds and windows, for example doubled.
func moreRounds(cp *cellPlan) string {
	rounds, duration := "-rounds", "-duration"
	switch {
	case cp.quota > 0:
		rounds, duration = "-quota-rounds", "-quota-duration"
	case cp.rate > 0:
		rounds = "-sweep-rounds"
	}
	return fmt.Sprintf("rerun with, for example, %s %d %s %v", rounds, 2*cp.rounds, duration, 2*cp.duration)
}
