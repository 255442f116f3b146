"""The first-light checklist: from reset to roofline, stage by stage."""
