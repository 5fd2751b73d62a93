//! Intel 82599 driver: device init (datasheet 4.6.3), agent model and queue model
