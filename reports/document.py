"""A report's structure: sections of tables, charts and notes, as `report` assembles them and `render`
writes them (a module of its own so that neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass, field

from matplotlib.figure import Figure

from specbench.reports.charts import WIDE
from specbench.reports.tables import Table


@dataclass
class Chart:
    name: str  # file stem
    title: str
    figure: Figure

    @property
    def width_share(self) -> float:
        """The figure's width as a share of a two-column page's text width (its print size)."""
        return min(1.0, self.figure.get_figwidth() / WIDE)


@dataclass
class Section:
    title: str
    tables: list[Table] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Report:
    title: str
    sections: list[Section]

    @property
    def notes(self) -> list[str]:
        return [note for section in self.sections for note in section.notes]
