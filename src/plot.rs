//! What every plot shares (the search's, a trial's latency, a SPEAD receive's):
//! the file format chosen by the path's extension, the error, the chart frame,
//! the axis and grid style, and the legend box. One look, and one place to
//! change it.

use std::path::Path;

use plotters::chart::{
    ChartBuilder, ChartContext, MeshStyle, SeriesLabelPosition, SeriesLabelStyle,
};
use plotters::coord::cartesian::Cartesian2d;
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::{
    BitMapBackend, Color, DrawingArea, DrawingAreaErrorKind, DrawingBackend, IntoDrawingArea,
    RGBColor, SVGBackend, BLACK, WHITE,
};

/// Why a plot could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The file name ends neither in `.svg` nor in `.png`.
    #[error("plot path {0:?} must end in .svg or .png")]
    Format(String),
    /// The drawing backend failed (e.g. the file cannot be written).
    #[error("cannot draw plot {path:?}: {message}")]
    Draw {
        /// The file.
        path: String,
        /// The backend's message.
        message: String,
    },
}

/// The size of every plot, pixels.
pub const SIZE: (u32, u32) = (1200, 700);

/// The result of drawing on a backend.
pub type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// Draws to `path` as SVG or PNG by its extension (case-insensitive),
/// [`SIZE`] pixels, with the bundled font: `svg` and `png` are the same
/// drawing on the two backends (Rust closures cannot be generic over both).
pub fn to_file<'p>(
    path: &'p Path,
    svg: impl FnOnce(&DrawingArea<SVGBackend<'p>, Shift>) -> DrawResult<SVGBackend<'p>>,
    png: impl FnOnce(&DrawingArea<BitMapBackend<'p>, Shift>) -> DrawResult<BitMapBackend<'p>>,
) -> Result<(), PlotError> {
    crate::report::register_plot_font();
    let name = path.display().to_string();
    let err = |e: &dyn std::fmt::Display| PlotError::Draw {
        path: name.clone(),
        message: e.to_string(),
    };
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("svg") => {
            let root = SVGBackend::new(path, SIZE).into_drawing_area();
            svg(&root).map_err(|e| err(&e))?;
            root.present().map_err(|e| err(&e))
        }
        Some("png") => {
            let root = BitMapBackend::new(path, SIZE).into_drawing_area();
            png(&root).map_err(|e| err(&e))?;
            root.present().map_err(|e| err(&e))
        }
        _ => Err(PlotError::Format(name)),
    }
}

/// A chart frame on `area`: `margin` around it, `x_labels` pixels under it
/// for the x axis, room for the y axis's labels and description.
pub fn frame<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    margin: u32,
    x_labels: u32,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(area);
    b.margin(margin)
        .x_label_area_size(x_labels)
        .y_label_area_size(80);
    b
}

/// The title font.
pub const TITLE: (&str, u32) = ("sans-serif", 22);

/// The axes and grid in the common style; add descriptions and formatters,
/// then `draw()`.
pub fn mesh<'a, 'b, DB, X, Y, XT, YT>(
    chart: &'b mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
) -> MeshStyle<'a, 'b, X, Y, DB>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = XT> + ValueFormatter<XT>,
    Y: Ranged<ValueType = YT> + ValueFormatter<YT>,
{
    let mut m = chart.configure_mesh();
    m.label_style(("sans-serif", 14))
        .light_line_style(RGBColor(235, 235, 235));
    m
}

/// The legend box in the common style at `position`; `draw()` it.
pub fn legend<'a, 'b, DB, CT>(
    chart: &'b mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> SeriesLabelStyle<'a, 'b, DB, CT>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate,
{
    let mut l = chart.configure_series_labels();
    l.position(position)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 13));
    l
}
